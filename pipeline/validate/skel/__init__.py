"""SKEL, SimKube's trace-editing language: the parser (:mod:`.parse`, a lark grammar), the engine
(:mod:`.engine`) and :class:`SkelProgram`, which ``kubetape transform --skel`` and
``kubetape export --transform FILE.skel`` apply to SimKube and kubetape traces alike."""

from pipeline.validate.skel.engine import SkelRuntimeError
from pipeline.validate.skel.parse import SkelSyntaxError, parse_skel
from pipeline.validate.skel.program import SkelProgram, load_skel

__all__ = ["SkelProgram", "SkelRuntimeError", "SkelSyntaxError", "load_skel", "parse_skel"]
