# megatron-launch: preset toy (2-layer toy GPT of upstream's simple training loop)
# world 1 = 1 node(s) × 1 GPU(s) = TP 1 · PP 1 · CP 1 · DP 1
# batch 8 = micro batch 8 × DP 1 × 1 microbatch(es)
# parameters 6.10K (6,096; padded vocab 128)
# memory ~0.0 GiB per GPU of 79.1 on h100-80gb: fits (Megatron's own estimate 0.0 GiB; `launch plan` for the breakdown)
# kernels (preset): without Transformer Engine, without NVIDIA apex → --transformer-impl local --no-gradient-accumulation-fusion --no-masked-softmax-fusion --no-persist-layer-norm --spec launcher.inside.megatron_ext.sdpa_spec_fast layer_spec --no-create-attention-mask-in-dataloader --rerun-mode disabled
# runs python python3 (from PATH here, with this launcher's python3 first)
# runner python3 directly, without torchrun (one process here: torchrun would only add seconds of start-up (one H200, toy: 1.7-2.3 s command -> exit); the launcher exports what torchrun gives its worker (RANK=0 ... MASTER_PORT=0, TORCH_NCCL_ASYNC_ERROR_HANDLING=1 where unset); --set runner=torchrun to use it)
# run directory /opt/megatron-launch/runs/toy-YYYYMMDDTHHMMSSZ (made at launch, not by a dry-run; its timestamp is the launch's)
# note: one GPU: run_simple_mcore_train_loop.py needs 2 (it hard-codes TP 2), so the same 2-layer model trains through pretrain_gpt.py with TP 1, unfused as upstream's TransformerConfig (bias_gelu_fusion and bias_dropout_fusion false: exact GeLU)
# note: rerun_mode disabled (the launcher's default on the SDPA fast path): the NaN/Inf checks of loss and gradients still stop the run, read back at most 2 steps late and before every save instead of a host sync in each step (one H200, 345m, with the TensorBoard interval: +3.7 %, 0.962 -> 0.998 of compiled plain PyTorch); --set rerun_mode=validate_results for Megatron's re-run diagnosis
# note: TensorBoard every 1 iterations, the log interval (Megatron's default of 1 waits for the GPU in every step; one H200, 345m, with rerun_mode disabled: +3.7 %); --set tensorboard_log_interval=N to choose
# note: the ranks skip importing cupy, transformers, sentencepiece, tiktoken (MEGATRON_LAUNCH_SKIP_IMPORTS): Megatron imports them at start whether or not they are used, and this job cannot use them (one H200, 345m: Megatron's argument parsing 3.8 -> 0.24 s); --set env.MEGATRON_LAUNCH_SKIP_IMPORTS= to import them
# note: the ranks (and torchrun, where it runs) collect no garbage while they import (MEGATRON_LAUNCH_IMPORT_GC=paused): torch's and Megatron's imports otherwise run ~900 collections over the growing heap (2.5-3 s CPU of 8-9 in a rank on a CPU machine); once imported (the ranks: when Megatron initializes), one collection, what is alive then is frozen, and automatic collection resumes; --set env.MEGATRON_LAUNCH_IMPORT_GC=python for Python's own
# note: torch's compile workers start only when a kernel must be compiled (TORCH_WARM_POOL=0), not at the first torch.compile: with the compile cache warm none start (one H200, 345m: iteration 1 2.6 s and exit 6 s sooner); --set env.TORCH_WARM_POOL=1 for torch's default
# note: at exit a rank whose training returned cleanly ends at once (MEGATRON_LAUNCH_EXIT=quick): its files flushed and its GPU work finished, the interpreter's and CUDA's teardown skipped (one H200: 3.3-3.9 s sooner from the end of training to exit, against collect-once); any other end is Python's own; --set env.MEGATRON_LAUNCH_EXIT=python for Python's own always
# note: Megatron's JIT warm-up compiles nothing (MEGATRON_LAUNCH_JIT_WARMUP=draws): the layers are compiled whole, or the job turns off the fusions it compiles, so they never run; its random draws are kept, so the model's initialisation is the same (one H200, 345m: the warm-up 1.9-3.1 -> 0.01 s; toy: 2.0 s warm, 5.8 s on a fresh machine); --set env.MEGATRON_LAUNCH_JIT_WARMUP=megatron for Megatron's own
# note: the layers are the launcher's SDPA spec with fast ops norm,scale,adam,nosync (MEGATRON_LAUNCH_FAST_OPS=norm,scale,adam,nosync); one H200, 345m against compiled plain PyTorch: Megatron's local attention 0.16x, the SDPA spec 0.78x; nosync 0.987 -> 1.012x; --set env.MEGATRON_LAUNCH_FAST_OPS=none (or a subset, e.g. ce,norm) for Megatron's own
# warning: /opt/megatron-lm/pretrain_gpt.py does not exist here: the command needs a Megatron-LM checkout of 432d76b2b8bf there; run `launch fetch-megatron` (the pinned commit into your data directory, remembered), or give --megatron-path DIR
export PYTHONPATH=/opt/megatron-lm:/opt/megatron-launch:/opt/megatron-launch/launcher/inside/site
export MEGATRON_LAUNCH_SKIP_IMPORTS=cupy,transformers,sentencepiece,tiktoken
export MEGATRON_LAUNCH_IMPORT_GC=paused
export MEGATRON_LAUNCH_JIT_WARMUP=draws
export MEGATRON_LAUNCH_EXIT=quick
export TORCH_WARM_POOL=0
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export MEGATRON_LAUNCH_FAST_OPS=norm,scale,adam,nosync
export RANK=0
export LOCAL_RANK=0
export WORLD_SIZE=1
export LOCAL_WORLD_SIZE=1
export GROUP_RANK=0
export ROLE_RANK=0
export ROLE_WORLD_SIZE=1
export MASTER_ADDR=127.0.0.1
export MASTER_PORT=0
python3 -u \
  /opt/megatron-lm/pretrain_gpt.py \
  --no-bias-gelu-fusion \
  --no-bias-dropout-fusion \
  --num-layers 2 \
  --hidden-size 12 \
  --num-attention-heads 4 \
  --seq-length 64 \
  --max-position-embeddings 64 \
  --vocab-size 100 \
  --tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 1 \
  --micro-batch-size 8 \
  --train-iters 5 \
  --lr 0.001 \
  --lr-decay-style constant \
  --eval-interval 1000 \
  --eval-iters 0 \
  --mock-data \
  --tokenizer-type NullTokenizer \
  --ckpt-format torch \
  --log-interval 1 \
  --transformer-impl local \
  --no-gradient-accumulation-fusion \
  --no-masked-softmax-fusion \
  --no-persist-layer-norm \
  --spec launcher.inside.megatron_ext.sdpa_spec_fast layer_spec \
  --no-create-attention-mask-in-dataloader \
  --rerun-mode disabled \
  --save /opt/megatron-launch/runs/toy-YYYYMMDDTHHMMSSZ/checkpoints \
  --load /opt/megatron-launch/runs/toy-YYYYMMDDTHHMMSSZ/checkpoints \
  --save-interval 5 \
  --tensorboard-dir /opt/megatron-launch/runs/toy-YYYYMMDDTHHMMSSZ/tensorboard \
  --tensorboard-log-interval 1
