"""Structural layer of Lance 2.1+: repetition/definition levels, shredding, mini-block/full-zip pages, chunk batches.

Every page of a 2.1+ column (``lance.encodings21.PageLayout``) is one of:

* **mini-block** -- buffer 0: chunk metadata, one word per chunk (u16 in 2.1, u32 when the layout's
  ``has_large_chunk`` (field 10, set by 2.2+ writers) is true): ``(size_in_8_byte_words - 1) << 4 |
  log2(values in chunk)`` (0 for the last chunk, whose count is ``num_items`` minus the others).
  Buffer 1: the chunks, each 8-byte aligned: ``u16 num_levels`` (0 without rep/def), ``u16 rep
  bytes`` (if rep), ``u16 def bytes`` (if def), one size per value buffer (u16, or u32 with large
  chunks), padding to 8 (0xFE), then rep, def and value buffers each padded to 8. Optional buffer 2:
  the dictionary (block encoded). Next buffer, when ``repetition_index_depth > 0``: the repetition
  index, ``depth + 1`` u64 per chunk: rows that end in the chunk, and items left over after the last
  row end (a "trailer" that continues in the next chunk).
* **full-zip** -- buffer 0: per level entry a control word (``rep << bits_def | def``, 1/2/4 bytes
  by ``bits_rep + bits_def`` <= 8/16/32; absent when both are 0) then, for visible entries, the
  value: fixed width (``bits_per_value``) for every visible entry, or, for variable width, a length
  (``bits_per_offset``) and the bytes for valid entries only. Buffer 1 (variable width or lists):
  the repetition index -- byte offset of each row start plus the end, as byte-packed integers of
  1/2/4/8 bytes (``buffer size / (rows + 1)``).
* **all-null / constant** (field 2) -- no value data. Buffers 0/1 hold rep/def levels when there
  are lists or several kinds of null (2.1: raw u16; 2.2: ``rep_compression`` (7) /
  ``def_compression`` (8) with ``num_rep_values`` (9) / ``num_def_values`` (10)); a 2.2 constant
  page carries the value in ``inline_value`` (6).
* **blob** -- an inner layout of (position u64, size u64) descriptions; the bytes live elsewhere in
  the file. size 0 + position 0 = empty, size 0 + position != 0 = null (position = def level).
"""
