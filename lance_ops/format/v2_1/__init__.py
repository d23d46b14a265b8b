"""Lance 2.1 and 2.2 data files (one structural encoding): reader, encoders, decoders; `layout/` and `compression/` apart."""
