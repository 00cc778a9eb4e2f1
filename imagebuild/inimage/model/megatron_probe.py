"""What a CPU can prove of the image's Megatron-LM, in a process of its own:

  python -m <package>.model.megatron_probe REQUEST.json

1. Megatron's own parser and validation (``parse_args`` + ``validate_args``) accept the GPU
   argument list of the ``megatron`` check, which follows the ReFrame check's;
2. Megatron builds a GPTModel of the same architecture (reduced width, the CPU argument
   list: local layers, float32) on CPU over gloo, with ``use_cpu_initialization``.

No iteration: Megatron's forward pass calls ``torch.cuda.current_device()`` (rotary
embedding, its global memory buffer), so training is a GPU proof. Prints one JSON line.
Megatron is imported from the image (its .pth entry) or ``REQUEST["megatron_dir"]``.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any

from ..job_rank import free_port


def _parse(argv: list[str], world_size: int) -> Any:
    from megatron.training.arguments import parse_args, validate_args

    os.environ["WORLD_SIZE"] = str(world_size)  # parse_args reads the launch from the environment
    sys.argv = ["pretrain_gpt.py", *argv]
    args = parse_args()
    validate_args(args, {})
    return args


def probe(request: dict[str, Any]) -> dict[str, Any]:
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(free_port()), **request.get("env", {}))
    if request.get("megatron_dir"):
        sys.path.insert(0, request["megatron_dir"])
    result: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # The Swiss AI fork imports megatron.core.transformer through megatron.training
        # first, or its imports are circular.
        import megatron.training
        import torch
        from megatron.core import package_info

        result["megatron"] = {"file": os.path.dirname(os.path.dirname(megatron.training.__file__)),
                              "version": package_info.__version__}
        gpu = _parse(request["gpu_args"], request["gpu_world_size"])
        result["gpu_arguments"] = {
            "parsed": True, "count": len(request["gpu_args"]),
            "world_size": request["gpu_world_size"],
            "transformer_impl": gpu.transformer_impl, "bf16": gpu.bf16,
            "use_distributed_optimizer": gpu.use_distributed_optimizer,
            "tokenizer_type": gpu.tokenizer_type}

        args = _parse(request["cpu_args"], 1)
        from megatron.core import parallel_state
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.training.arguments import core_transformer_config_from_args
        from megatron.training.tokenizer import build_tokenizer

        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
        try:
            parallel_state.initialize_model_parallel(1, 1)
            build_tokenizer(args)  # sets args.padded_vocab_size (NullTokenizer: offline)
            config = core_transformer_config_from_args(args)
            model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(),
                             vocab_size=args.padded_vocab_size,
                             max_sequence_length=args.max_position_embeddings,
                             position_embedding_type=args.position_embedding_type,
                             rotary_base=args.rotary_base)
            result["cpu_model"] = {
                "class": type(model).__name__, "layers": config.num_layers,
                "hidden": config.hidden_size, "ffn_hidden": config.ffn_hidden_size,
                "heads": config.num_attention_heads, "kv_groups": config.num_query_groups,
                "vocab_padded": args.padded_vocab_size,
                "normalization": config.normalization,
                "gated_linear_unit": bool(config.gated_linear_unit),
                "parameters": sum(p.numel() for p in model.parameters())}
        finally:
            torch.distributed.destroy_process_group()
    result["warnings"] = sorted({str(w.message).splitlines()[0] for w in caught})[:20]
    return result


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    result = probe(request)
    # Megatron prints its argument table on stdout: the result is the last line.
    print("\n" + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
