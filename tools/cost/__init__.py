"""`make cost`: docs/cost.md from a model whose inputs are measured on the local stack."""
