"""The training tests' fixtures, defined in `train_helpers` beside this file."""

from train_helpers import quiet_train, spec_file

__all__ = ["quiet_train", "spec_file"]
