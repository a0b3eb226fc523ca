"""Write real Megatron checkpoints on the CPU: Megatron's own parse_args/validate_args, a GPTModel of the toy
preset's shape and megatron.training.checkpointing.save_checkpoint, in WORLD gloo processes.

    python checkpoint_writer.py OUT_DIR WORLD PORT FORMAT[,FORMAT...] [MEGATRON FLAGS...]

Each format is saved into OUT_DIR/FORMAT at iteration 10 with 80 samples consumed. A second format is saved the
way Megatron's own --ckpt-convert-format does (training.py: args.ckpt_format changed, update_use_dist_ckpt). On a
CPU, torch.cuda's device and RNG calls are redirected to the CPU (shared/reference/megatron-core-on-cpu.md).
"""

from __future__ import annotations

import multiprocessing
import os
import sys

ITERATION = 10
CONSUMED = 80
TOY_FLAGS = ["--num-layers", "2", "--hidden-size", "12", "--num-attention-heads", "4", "--seq-length", "64",
             "--max-position-embeddings", "64", "--vocab-size", "100", "--tokenizer-type", "NullTokenizer",
             "--micro-batch-size", "8", "--global-batch-size", "8", "--train-iters", "20", "--lr", "1e-3",
             "--mock-data", "--save-interval", "10", "--no-gradient-accumulation-fusion", "--transformer-impl",
             "local", "--use-cpu-initialization", "--no-persist-layer-norm", "--no-masked-softmax-fusion",
             "--no-bias-gelu-fusion", "--no-bias-dropout-fusion", "--no-rope-fusion"]


def write(out: str, rank: int, world: int, port: int, formats: list[str], extra: list[str]) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    import torch

    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
    import torch.distributed as dist
    from megatron.training import arguments, global_vars

    arguments.get_device_arch_version = lambda: 9  # validate_args asks the GPU at TP > 1
    sys.argv = ["pretrain_gpt.py", *TOY_FLAGS, "--save", os.path.join(out, formats[0]), "--ckpt-format", formats[0],
                *extra]
    args = arguments.parse_args()
    arguments.validate_args(args)
    global_vars.set_global_variables(args)  # builds the NullTokenizer and pads the vocabulary, as at a start
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from megatron.core import parallel_state as mpu
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel import random as tp_random
    from megatron.training.arguments import core_transformer_config_from_args
    from megatron.training.checkpointing import save_checkpoint
    from megatron.training.utils.common_utils import update_use_dist_ckpt

    mpu.initialize_model_parallel(args.tensor_model_parallel_size, args.pipeline_model_parallel_size)
    torch.manual_seed(1)
    tp_random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    model = GPTModel(config=core_transformer_config_from_args(args), transformer_layer_spec=get_gpt_layer_local_spec(),
                     vocab_size=args.padded_vocab_size,
                     max_sequence_length=args.max_position_embeddings, pre_process=mpu.is_pipeline_first_stage(),
                     post_process=mpu.is_pipeline_last_stage())
    args.consumed_train_samples = CONSUMED
    for fmt in formats:
        args.ckpt_format = fmt
        args.save = os.path.join(out, fmt)
        update_use_dist_ckpt(args)
        save_checkpoint(ITERATION, [model], None, None, 0)
        dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    out, world, port, formats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")
    extra = sys.argv[5:]
    if world == 1:
        write(out, 0, 1, port, formats, extra)
        return 0
    context = multiprocessing.get_context("spawn")
    ranks = [context.Process(target=write, args=(out, rank, world, port, formats, extra)) for rank in range(world)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join()
    return max(process.exitcode or 0 for process in ranks)


if __name__ == "__main__":
    sys.exit(main())
