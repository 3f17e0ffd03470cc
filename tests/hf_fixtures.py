"""Tiny local Hugging Face / sentence-transformers models built on the spot (no download): a word-level tokenizer over a
small vocabulary."""

from pathlib import Path

WORDS = (
    "a an the dog cat man woman horse red blue green small large on in with of and is are sitting riding "
    "table plate two three bird branch tree street car bus white black holding near top next to"
).split()


def word_tokenizer(max_length=32):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        model_max_length=max_length,
    )


def tiny_bert(folder: Path) -> Path:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    tok = word_tokenizer()
    BertModel(
        BertConfig(
            vocab_size=len(tok),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
        )
    ).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def tiny_sentence_transformer(folder: Path) -> Path:
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer  # >= 6
    except ImportError:
        from sentence_transformers.models import Pooling, Transformer
    bert = tiny_bert(folder.parent / (folder.name + "-bert"))
    st = SentenceTransformer(modules=[Transformer(str(bert)), Pooling(32, "mean")])
    st.save(str(folder))
    return folder


def tiny_hf_clip(folder: Path) -> Path:
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(0)
    tok = word_tokenizer()
    cfg = CLIPConfig(
        text_config=dict(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=32,
            eos_token_id=3,
            pad_token_id=0,
            bos_token_id=2,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=16,
        ),
        projection_dim=16,
    )
    CLIPModel(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder
