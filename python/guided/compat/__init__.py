"""The call surfaces of other constrained-decoding libraries and engines, backed by guided.

Engines already speak outlines-core's, xgrammar's, vLLM's or SGLang's structured-output interface.
Rather than ask them to learn a new one, guided answers in theirs:

- :mod:`guided.compat.outlines_core`: ``Vocabulary``, ``Index``, ``Guide`` and
  ``json_schema.build_regex_from_schema``, as vLLM's and SGLang's outlines backends call them.
- :mod:`guided.compat.xgrammar`: ``TokenizerInfo``, ``GrammarCompiler``, ``CompiledGrammar``,
  ``GrammarMatcher``, ``BatchGrammarMatcher`` and the bitmask helpers.
- :mod:`guided.compat.vllm`: a grammar with exactly the methods of vLLM's
  ``StructuredOutputGrammar`` and a backend-shaped factory.
- :mod:`guided.compat.sglang`: a grammar object with the methods of SGLang's ``BaseGrammarObject``
  and a backend-shaped factory.

None of them imports the library or engine it imitates; each module's opening text lists where its
semantics differ from the original, and why. This package imports nothing itself: each shim is
loaded when it is named, and only the xgrammar, vLLM and SGLang ones need torch (when a mask is
allocated or applied).
"""

from __future__ import annotations

__all__: list[str] = []
