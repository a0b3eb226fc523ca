# megatron-launch: preset 175b (GPT-3 175B, TP 8 · PP 16 on 192 nodes × 8 GPUs)
# world 1536 = 192 node(s) × 8 GPU(s) = TP 8 · PP 16 · CP 1 · DP 12
# batch 1536 = micro batch 1 × DP 12 × 128 microbatch(es)
# parameters 174.62B (174,615,846,912; padded vocab 51200)
# memory ~19.5 GiB per GPU of 79.1 on h100-80gb: fits (Megatron's own estimate 40.5 GiB; ours is 21.0 GiB lower, mostly sequence parallel (-19.7 GiB): Megatron's report uses its sequence-parallel formula only with selective recompute; the run shards norms and dropouts over TP 8; `launch plan` for the breakdown)
# kernels (preset): with Transformer Engine, with NVIDIA apex
# runs python python3, torchrun torchrun (from PATH here, with this launcher's python3 first)
# runner torchrun (1536 processes)
# run directory /opt/megatron-launch/runs/175b-YYYYMMDDTHHMMSSZ (made at launch, not by a dry-run; its timestamp is the launch's)
# note: TensorBoard every 10 iterations, the log interval (Megatron's default of 1 waits for the GPU in every step; one H200, 345m, with rerun_mode disabled: +3.7 %); --set tensorboard_log_interval=N to choose
# warning: /opt/megatron-lm/pretrain_gpt.py does not exist here: the command needs a Megatron-LM checkout of 432d76b2b8bf there; run `launch fetch-megatron` (the pinned commit into your data directory, remembered), or give --megatron-path DIR
# run this same command on each of the 192 nodes; MASTER_ADDR is the first node
: "${MASTER_ADDR:?set MASTER_ADDR to the hostname of the first node}"
export CUDA_DEVICE_MAX_CONNECTIONS=1
export PYTHONPATH=/opt/megatron-lm
torchrun --nnodes 192 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint "${MASTER_ADDR}:29500" --rdzv-id megatron-launch-175b \
  /opt/megatron-lm/pretrain_gpt.py \
  --num-layers 96 \
  --hidden-size 12288 \
  --num-attention-heads 96 \
  --seq-length 2048 \
  --max-position-embeddings 2048 \
  --vocab-size 50257 \
  --init-method-std 0.006 \
  --tensor-model-parallel-size 8 \
  --pipeline-model-parallel-size 16 \
  --sequence-parallel \
  --use-distributed-optimizer \
  --overlap-grad-reduce \
  --overlap-param-gather \
  --micro-batch-size 1 \
  --global-batch-size 1536 \
  --bf16 \
  --lr 6e-05 \
  --min-lr 6e-06 \
  --lr-decay-style cosine \
  --train-samples 146484375 \
  --lr-warmup-samples 183105 \
  --lr-decay-samples 126953125 \
  --weight-decay 0.1 \
  --adam-beta1 0.9 \
  --adam-beta2 0.95 \
  --clip-grad 1.0 \
  --eval-interval 1000 \
  --eval-iters 10 \
  --mock-data \
  --tokenizer-type NullTokenizer \
  --log-interval 10 \
  --log-throughput \
  --save /opt/megatron-launch/runs/175b-YYYYMMDDTHHMMSSZ/checkpoints \
  --load /opt/megatron-launch/runs/175b-YYYYMMDDTHHMMSSZ/checkpoints \
  --save-interval 1000 \
  --save-retain-interval 10000 \
  --tensorboard-dir /opt/megatron-launch/runs/175b-YYYYMMDDTHHMMSSZ/tensorboard \
  --tensorboard-log-interval 10
