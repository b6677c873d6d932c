"""Developer tools run from the Makefile: documentation generators and galleries."""
