"""Argument codecs: turn a family's call syntax into streamed, valid JSON arguments."""
