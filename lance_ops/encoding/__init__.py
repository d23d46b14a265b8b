"""Page encoders and decoders per Lance file format version (2.0 first)."""
from lance_ops.encoding.encode_v2_0 import EncodedArray, encode_leaf_page
from lance_ops.encoding.fields_v2_0 import EncodedPage, FieldEncoder, build_encoder

__all__ = ["EncodedArray", "EncodedPage", "FieldEncoder", "build_encoder", "encode_leaf_page"]
