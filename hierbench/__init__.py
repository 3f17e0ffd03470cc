"""A notebook-first workbench for hierarchical and compositional image-text representations (ARGENT, DeGLA, READ, CLIP, MERU, HyCoCLIP, NegCLIP)

Modules:

- `hierbench.train`: One trainer for every recipe: AdamW with parameter groups, warmup + cosine, clipping, bf16 on CUDA, EMA teacher, NaN guard, JSON-lines metrics, atomic checkpoints, bit-exact resume, and multi-process contrastive training.
- `hierbench.viz`: HoroPCA, PCA and UMAP views of embeddings, norm distributions, entailment-cone diagrams, training curves and sweep bars: pure functions that return plotly figures.
- `hierbench.world`: A procedurally generated image-text universe with a known hierarchy and exact truth: scenes, caption chains, phrases and crops, paraphrases, alternatives, verified hard negatives, splits and an on-disk cache."""

__version__ = "0.1.0"
