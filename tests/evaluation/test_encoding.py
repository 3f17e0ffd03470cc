"Dense checks of hierbench.evaluation.encoding: batched encoding, eval mode, the word-hash reference model."

import numpy as np
import torch

from hierbench.evaluation import encoding as EN


def test_eval_mode_is_restored():
    m = EN.WordHashModel(dim=8)
    m.train()
    EN.encode_texts(m, ["a circle"])
    assert m.training


def test_word_hash_model_bag_of_words_is_exact():
    m = EN.WordHashModel(dim=16)
    e = m.encode_text(["a red circle left of a blue square", "a blue circle left of a red square"])
    assert torch.equal(e[0], e[1])  # bit-identical, so the comparison is a tie, not a coin flip


def test_encode_uint8_images_normalises_with_the_model_statistics():
    m = EN.WordHashModel(dim=8)
    m.image_mean, m.image_std = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
    imgs = np.random.default_rng(0).integers(0, 256, (5, 6, 6, 3), dtype=np.uint8)
    want = m.encode_image(torch.from_numpy(imgs).permute(0, 3, 1, 2).float() / 127.5 - 1)
    torch.testing.assert_close(EN.encode_uint8_images(m, imgs, batch_size=2), want)


def test_encode_image_list_takes_paths_pil_or_tensors(tmp_path):
    from PIL import Image

    m = EN.WordHashModel(dim=8)
    m.image_size = 8
    Image.new("RGB", (20, 10), (0, 255, 0)).save(tmp_path / "g.png")
    e = EN.encode_image_list(m, [str(tmp_path / "g.png"), Image.open(tmp_path / "g.png")], batch_size=1)
    torch.testing.assert_close(e[0], e[1])
    x = torch.randn(3, 3, 8, 8)
    torch.testing.assert_close(EN.encode_image_list(m, x), m.encode_image(x))
