"""The Slingshot CXI user-space stack and a libfabric with its cxi provider, in the image."""
