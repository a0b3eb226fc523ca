# megatron-launch: preset 345m (GPT-2 medium (345M) on mock data, one GPU)
# world 2 = 1 node(s) × 2 GPU(s) = TP 2 · PP 1 · CP 1 · DP 1
# batch 32 = micro batch 32 × DP 1 × 1 microbatch(es)
# parameters 355.00M (355,002,368; padded vocab 50432)
# memory ~25.7 GiB per GPU of 79.1 on h100-80gb: fits (Megatron's own estimate 22.0 GiB; ours is 3.7 GiB higher, mostly activation terms (+4.6 GiB): the most loaded stage (0), Korthikanti Table 2 widened for GQA/SwiGLU, attention scores when unfused, fp32 logits, recompute; `launch plan` for the breakdown)
# kernels (preset): without Transformer Engine, without NVIDIA apex → --transformer-impl local --no-gradient-accumulation-fusion --no-masked-softmax-fusion --no-persist-layer-norm --spec launcher.inside.megatron_ext.sdpa_spec_fast layer_spec --no-create-attention-mask-in-dataloader --rerun-mode disabled
# runs python python3, torchrun torchrun (from PATH here, with this launcher's python3 first)
# runner torchrun (2 processes)
# run directory /opt/megatron-launch/runs/345m-YYYYMMDDTHHMMSSZ (made at launch, not by a dry-run; its timestamp is the launch's)
# note: micro batch 32: the largest divisor of global batch 32 / DP 1 up to max_micro_batch_size 32 (pin it with --set micro_batch_size=N)
# note: rerun_mode disabled (the launcher's default on the SDPA fast path): the NaN/Inf checks of loss and gradients still stop the run, read back at most 2 steps late and before every save instead of a host sync in each step (one H200, 345m, with the TensorBoard interval: +3.7 %, 0.962 -> 0.998 of compiled plain PyTorch); --set rerun_mode=validate_results for Megatron's re-run diagnosis
# note: TensorBoard every 10 iterations, the log interval (Megatron's default of 1 waits for the GPU in every step; one H200, 345m, with rerun_mode disabled: +3.7 %); --set tensorboard_log_interval=N to choose
# note: the ranks skip importing cupy, transformers, sentencepiece, tiktoken (MEGATRON_LAUNCH_SKIP_IMPORTS): Megatron imports them at start whether or not they are used, and this job cannot use them (one H200, 345m: Megatron's argument parsing 3.8 -> 0.24 s); --set env.MEGATRON_LAUNCH_SKIP_IMPORTS= to import them
# note: the ranks (and torchrun, where it runs) collect no garbage while they import (MEGATRON_LAUNCH_IMPORT_GC=paused): torch's and Megatron's imports otherwise run ~900 collections over the growing heap (2.5-3 s CPU of 8-9 in a rank on a CPU machine); once imported (the ranks: when Megatron initializes), one collection, what is alive then is frozen, and automatic collection resumes; --set env.MEGATRON_LAUNCH_IMPORT_GC=python for Python's own
# note: torch's compile workers start only when a kernel must be compiled (TORCH_WARM_POOL=0), not at the first torch.compile: with the compile cache warm none start (one H200, 345m: iteration 1 2.6 s and exit 6 s sooner); --set env.TORCH_WARM_POOL=1 for torch's default
# note: at exit a rank whose training returned cleanly ends at once (MEGATRON_LAUNCH_EXIT=quick): its files flushed and its GPU work finished, the interpreter's and CUDA's teardown skipped (one H200: 3.3-3.9 s sooner from the end of training to exit, against collect-once); any other end is Python's own; --set env.MEGATRON_LAUNCH_EXIT=python for Python's own always
# note: Megatron's JIT warm-up compiles nothing (MEGATRON_LAUNCH_JIT_WARMUP=draws): the layers are compiled whole, or the job turns off the fusions it compiles, so they never run; its random draws are kept, so the model's initialisation is the same (one H200, 345m: the warm-up 1.9-3.1 -> 0.01 s; toy: 2.0 s warm, 5.8 s on a fresh machine); --set env.MEGATRON_LAUNCH_JIT_WARMUP=megatron for Megatron's own
# note: the layers are the launcher's SDPA spec with fast ops ce,norm,scale,adam,nosync,nancheck,layer,save (all, the default); one H200, 345m against compiled plain PyTorch: Megatron's local attention 0.16x, the SDPA spec 0.78x; ce,norm,scale,adam 0.78 -> 0.93x; layer (the compiled layers) +6 to 7 %; nosync 0.987 -> 1.012x; nancheck: see rerun_mode; save: a save blocks 0.358 s instead of 2.365 s; --set env.MEGATRON_LAUNCH_FAST_OPS=none (or a subset, e.g. ce,norm) for Megatron's own
# warning: /opt/megatron-lm/pretrain_gpt.py does not exist here: the command needs a Megatron-LM checkout of 432d76b2b8bf there; run `launch fetch-megatron` (the pinned commit into your data directory, remembered), or give --megatron-path DIR
export CUDA_DEVICE_MAX_CONNECTIONS=1
export PYTHONPATH=/opt/megatron-lm:/opt/megatron-launch:/opt/megatron-launch/launcher/inside/site
export MEGATRON_LAUNCH_SKIP_IMPORTS=cupy,transformers,sentencepiece,tiktoken
export MEGATRON_LAUNCH_IMPORT_GC=paused
export MEGATRON_LAUNCH_JIT_WARMUP=draws
export MEGATRON_LAUNCH_EXIT=quick
export TORCH_WARM_POOL=0
torchrun --nnodes 1 --nproc-per-node 2 --standalone \
  /opt/megatron-lm/pretrain_gpt.py \
  --num-layers 24 \
  --hidden-size 1024 \
  --num-attention-heads 16 \
  --seq-length 1024 \
  --max-position-embeddings 1024 \
  --vocab-size 50257 \
  --pipeline-model-parallel-size 1 \
  --global-batch-size 32 \
  --bf16 \
  --lr 0.00015 \
  --min-lr 1e-05 \
  --lr-decay-style cosine \
  --lr-warmup-fraction 0.01 \
  --lr-decay-iters 320000 \
  --train-iters 500000 \
  --weight-decay 0.01 \
  --clip-grad 1.0 \
  --hidden-dropout 0.0 \
  --attention-dropout 0.0 \
  --eval-interval 1000 \
  --eval-iters 10 \
  --mock-data \
  --tokenizer-type NullTokenizer \
  --async-save \
  --use-persistent-ckpt-worker \
  --async-strategy mcore \
  --dist-ckpt-workers 4 \
  --ckpt-assume-constant-structure \
  --log-interval 10 \
  --log-throughput \
  --tensor-model-parallel-size 2 \
  --micro-batch-size 32 \
  --transformer-impl local \
  --no-gradient-accumulation-fusion \
  --no-masked-softmax-fusion \
  --no-persist-layer-norm \
  --spec launcher.inside.megatron_ext.sdpa_spec_fast layer_spec \
  --no-create-attention-mask-in-dataloader \
  --rerun-mode disabled \
  --save /opt/megatron-launch/runs/345m-YYYYMMDDTHHMMSSZ/checkpoints \
  --load /opt/megatron-launch/runs/345m-YYYYMMDDTHHMMSSZ/checkpoints \
  --save-interval 1000 \
  --save-retain-interval 10000 \
  --tensorboard-dir /opt/megatron-launch/runs/345m-YYYYMMDDTHHMMSSZ/tensorboard \
  --tensorboard-log-interval 10
