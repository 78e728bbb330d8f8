"""The micro student M0's build pipeline: demonstrations under a mixture of harnesses, a tokenizer, the copy
curriculum and full-parameter pretraining (`training.pretrain`). The committed weights live in deploy/micro/.

    build.py       MicroSpec and build_micro_model (`coevo model micro`)
    vocab.py       the chat template and special tokens the tiny and micro students share
    mixture.py     the harnesses demonstrations are drawn under (h0, hK, random typed-edit variations)
    policies.py    the show-your-work demonstration policies (each reads its harness)
    augment.py     random-name and random-SKU copies of demonstrations
    curriculum.py  the synthetic copy sequences of the copy phase
"""
