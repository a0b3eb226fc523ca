# megatron-launch: preset toy (2-layer toy GPT of upstream's simple training loop)
# world 2 = 1 node(s) × 2 GPU(s) = TP 2 · PP 1 · CP 1 · DP 1
# batch 8 = micro batch 8 × DP 1 × 1 microbatch(es)
# parameters 6.96K (6,960; padded vocab 100)
# memory ~0.0 GiB per GPU of 79.1 on h100-80gb: fits (Megatron's own estimate 0.0 GiB; `launch plan` for the breakdown)
# runs python python3, torchrun torchrun (from PATH here, with this launcher's python3 first)
# runner torchrun (2 processes)
# run directory /opt/megatron-launch/runs/toy-YYYYMMDDTHHMMSSZ (made at launch, not by a dry-run; its timestamp is the launch's)
# a launch runs this command with the run directory as its working directory (upstream's loop writes ./ckpt); pasted, ./ckpt is made in the current directory
# warning: /opt/megatron-lm/examples/run_simple_mcore_train_loop.py does not exist here: the command needs a Megatron-LM checkout of 432d76b2b8bf there; run `launch fetch-megatron` (the pinned commit into your data directory, remembered), or give --megatron-path DIR
export CUDA_DEVICE_MAX_CONNECTIONS=1
export PYTHONPATH=/opt/megatron-lm
export MEGATRON_LAUNCH_FAST_OPS=norm,scale,adam,nosync
torchrun --nnodes 1 --nproc-per-node 2 --standalone \
  /opt/megatron-lm/examples/run_simple_mcore_train_loop.py
