"""Example models for Basin's ``model`` target (``examples.digits_mlp:make``) and a training run
whose checkpoints give an LLC-over-training curve (``python -m examples.train_digits``)."""
