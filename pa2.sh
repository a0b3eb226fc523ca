cat <<A
$(
$(
torchrun pretrain_gpt.py --num-layers 2
A
