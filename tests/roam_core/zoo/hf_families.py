"""Small configs of Hugging Face model families: ``model_type -> (task, settings)``.

Each builds offline with no weights (``roam_core.zoo.hf.build_hf_step(model_type, ...,
**settings)``) and is small enough to trace, plan and replay on CPU in a test.  The MoE
families use ``experts_implementation="batched_mm"``: transformers' default ``grouped_mm``
experts do not trace in float32 (the way-out test checks the message that says so).
"""

from __future__ import annotations

from typing import Any

_S: dict[str, Any] = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "intermediate_size": 64, "vocab_size": 128,
                      "max_position_embeddings": 64}
_KV = {**_S, "num_key_value_heads": 2}
_ENC_DEC = {"d_model": 32, "encoder_layers": 1, "decoder_layers": 1,
            "encoder_attention_heads": 4, "decoder_attention_heads": 4,
            "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "vocab_size": 128}
_MOE = {"experts_implementation": "batched_mm", "num_experts_per_tok": 2}

FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("causal-lm", _KV),
    "gpt2": ("causal-lm", {"n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 128,
                           "n_positions": 64}),
    "bert": ("masked-lm", _S),
    "t5": ("seq2seq", {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_heads": 4, "d_kv": 8,
                       "vocab_size": 128, "decoder_start_token_id": 0, "pad_token_id": 0}),
    "mistral": ("causal-lm", _KV),
    "qwen2": ("causal-lm", _KV),
    "qwen3": ("causal-lm", {**_KV, "head_dim": 8}),
    "gpt_neox": ("causal-lm", _S),
    "vit": ("image-classification", {**_S, "image_size": 32, "patch_size": 8,
                                     "num_labels": 10}),
    "phi": ("causal-lm", _S),
    "gemma": ("causal-lm", {**_KV, "head_dim": 8}),
    "gemma2": ("causal-lm", {**_KV, "head_dim": 8}),
    "gemma3_text": ("causal-lm", {**_KV, "head_dim": 8}),
    "phi3": ("causal-lm", {**_KV, "pad_token_id": 0}),
    "qwen2_moe": ("causal-lm", {**_KV, **_MOE, "num_experts": 4, "moe_intermediate_size": 32,
                                "shared_expert_intermediate_size": 32}),
    "mixtral": ("causal-lm", {**_KV, **_MOE, "num_local_experts": 4}),
    "falcon": ("causal-lm", {"hidden_size": 32, "num_hidden_layers": 2,
                             "num_attention_heads": 4, "vocab_size": 128}),
    "opt": ("causal-lm", {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                          "ffn_dim": 64, "vocab_size": 128, "max_position_embeddings": 64,
                          "word_embed_proj_dim": 32}),
    "distilbert": ("masked-lm", {"dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64,
                                 "vocab_size": 128, "max_position_embeddings": 64}),
    "deberta-v2": ("masked-lm", _S),
    "swin": ("image-classification", {"image_size": 32, "patch_size": 4, "embed_dim": 16,
                                       "depths": [1, 1], "num_heads": [2, 2],
                                       "window_size": 4, "num_labels": 10}),
    "convnext": ("image-classification", {"image_size": 32, "num_stages": 2,
                                          "hidden_sizes": [8, 16], "depths": [1, 1],
                                          "num_labels": 10}),
    "whisper": ("speech-seq2seq", {**_ENC_DEC, "num_mel_bins": 8, "max_source_positions": 16,
                                   "max_target_positions": 32, "decoder_start_token_id": 1,
                                   "pad_token_id": 0}),
    "bart": ("seq2seq", {**_ENC_DEC, "max_position_embeddings": 64}),
    "mamba": ("causal-lm", {"hidden_size": 32, "num_hidden_layers": 2, "vocab_size": 128,
                            "state_size": 8, "expand": 2}),
}

#: The families of the fast test tier (the others are ``slow``).
FAST = ("gpt_neox",)

#: The architecture kind of every family: what a family adds to the suite beyond its kind
#: is a config, so the suite replays one family per kind (:data:`SUITE`) and the others at
#: ``./dev.sh matrix``.
KINDS: dict[str, str] = {
    "llama": "decoder-gqa", "mistral": "decoder-gqa", "qwen2": "decoder-gqa",
    "qwen3": "decoder-gqa", "gemma": "decoder-gqa", "gemma2": "decoder-gqa",
    "gemma3_text": "decoder-gqa", "phi3": "decoder-gqa",
    "gpt2": "decoder-mha", "gpt_neox": "decoder-mha", "phi": "decoder-mha",
    "falcon": "decoder-mha", "opt": "decoder-mha",
    "bert": "encoder", "distilbert": "encoder", "deberta-v2": "encoder",
    "t5": "encoder-decoder", "bart": "encoder-decoder",
    "whisper": "speech-encoder-decoder",
    "vit": "vision-transformer", "swin": "vision-transformer",
    "convnext": "vision-cnn",
    "qwen2_moe": "moe", "mixtral": "moe",
    "mamba": "ssm",
}

#: One family per kind, replayed in the suite; both batch sizes are covered among them.
SUITE = ("gpt_neox", "llama", "bert", "t5", "whisper", "vit", "convnext", "mixtral", "mamba")
