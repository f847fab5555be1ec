"""A tiny Llama-architecture model, its tokenizer and a synthetic chat corpus, written to a folder as a Hugging
Face checkout would be, so the stacks that load a model by path (Unsloth, Axolotl) train one without
downloading anything.

    import tiny_hf
    path = tiny_hf.write_model("/tmp/tiny-llama", seed=1234)     # config.json, weights, tokenizer files
    texts = tiny_hf.chats(64, seed=1234)                          # ["<s> user: w3 w17 ... assistant: ... </s>", ...]
"""

import os

WORDS = 120


def chats(count, seed):
    """User turns of random words and assistant turns that answer each word with its successor: learnable."""
    import torch
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        words = torch.randint(0, WORDS - 1, (6,), generator=g).tolist()
        question = " ".join("w%d" % w for w in words)
        answer = " ".join("w%d" % (w + 1) for w in words)
        out.append("user: %s assistant: %s" % (question, answer))
    return out


def write_model(path, seed, hidden=64, layers=2, heads=4):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {t: i for i, t in enumerate(specials + ["user:", "assistant:"] + ["w%d" % i for i in range(WORDS)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                        pad_token="<pad>")
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=3)
    os.makedirs(path, exist_ok=True)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
