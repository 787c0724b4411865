"""AWS CDK v2 infrastructure of the payload store: one stack, one construct per concern."""
