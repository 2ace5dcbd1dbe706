"""The package version (a leaf module: codegen and the runtime read it without importing the package root)."""
__version__ = "0.1.0"
