"""roce-testbed: an emulated lossless-Ethernet lab."""
