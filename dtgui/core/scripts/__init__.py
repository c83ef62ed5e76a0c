"""A user's own training script: as a plan's model, in a bundle, its progress, its printed lines, a static look at it."""
