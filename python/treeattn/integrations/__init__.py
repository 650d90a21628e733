"""treeattn.integrations: plugins that put treeattn's decode attention inside serving engines
(vllm: ``pip install 'treeattn[vllm]'``, see docs/vllm.md; sglang: ``pip install
'treeattn[sglang]'``, see docs/sglang.md)."""
