"""Structural layer of Lance 2.1+: repetition/definition levels, shredding, mini-block/full-zip pages, chunk batches."""
