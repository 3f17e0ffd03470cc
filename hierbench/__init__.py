"""A notebook-first workbench for hierarchical and compositional image-text representations (ARGENT, DeGLA, READ, CLIP, MERU, HyCoCLIP, NegCLIP)

Modules:

- `hierbench.bench.compositional`: The compositional row of `hierbench bench`'s section `evals`: all seven families of issue 47 scored through `hierbench.evaluation.compositional` (one image cache, batched encoding, decoding workers) against a plain per-item loop on the same model and files — the speed ratio, and whether the numbers are equal.
- `hierbench.bench.convolutions`: Each convolution of the world ResNet tower timed alone at the shapes a training step gives it, forward and backward, against the core's matmul peak: the evidence for what fusing and compiling the step can and cannot win (section `loop` of `hierbench bench` prints it).
- `hierbench.bench.evals`: Section `evals` of `hierbench bench`: zero-shot classification, image–text retrieval and the compositional families as hierbench runs them, timed against the plain per-batch open_clip loop CLIP_benchmark runs, on the same model, files, workers and threads — and the two must give the same numbers.
- `hierbench.bench.real`: hierbench's training step against open_clip_train's and SugarCrepe scoring against a per-item loop (section `real` of `hierbench bench`), and the sizes, clocks and training step every bench section shares.
- `hierbench.bench.seeds`: Section `seeds` of `hierbench bench`: world-tiny seeds per hour trained K to a process (`hierbench.recipes.seed_batch`) against today's one seed per process and core, timed in the same run; and the stacked-parameter step that was not chosen.
- `hierbench.bench.suite`: `hierbench bench`: how fast the geometry, the world and every recipe's training step are, each measured against a baseline timed in the same run.
- `hierbench.bench.view`: Section `view` of `hierbench bench`: `hierbench view` on HierarCaps' 1,000 photos and their captions — encoding, HoroPCA and PCA, the fields, the workspace write — timed against the encoding alone in the same run.
- `hierbench.cli.commands`: What each `hierbench` subcommand does once its flags are parsed: train, compare, negatives, paraphrases, check, export, bench, demo, docs.
- `hierbench.cli.docs`: Build the documentation site as static HTML into `_docs/`: nbdev's processed notebooks, show_doc tables, plotly figures.
- `hierbench.cli.eval_command`: `hierbench eval`: any model a researcher has on disk, scored by every protocol pointed at; paired comparisons and leaderboards of the results.
- `hierbench.cli.parser`: `hierbench`: the console script — compare, train, eval, bench, docs; its flags, parsed without importing torch.
- `hierbench.config`: Where datasets, runs and checkpoints live: `settings.ini` plus `HIERBENCH_*` environment variables.
- `hierbench.data.annotations`: What every loader shares: a field read and checked (an error names the file, the record and the field), files read strictly (no repeated JSON key, no header without rows), image paths kept inside their root, and records set aside with a warning that names them.
- `hierbench.data.batch`: The one batch format, errors that say where, images as tensors and the records every loader returns.
- `hierbench.data.loaders`: Benchmark and annotation files as typed records: SugarCrepe(++), COCO Karpathy, GRIT, HierarCaps, VALSE, ARO, the order benchmarks, NegCLIP's TSV, WhatsUp, CREPE — and a COCO image index and a folder check.
- `hierbench.data.negatives`: DeGLA's five rewrite rules and NegCLIP's swaps for arbitrary captions, with a pluggable tagger, a pluggable LLM and validation.
- `hierbench.data.paraphrases`: Paraphrase files for READ, written once like the negatives file: a pluggable generator (a local Hugging Face model or honest rules), validation against the negative rules, and statistics.
- `hierbench.data.real_data`: Training data from the files researchers have: COCO (Karpathy) captions, GRIT-style grounded captions, WebDataset shards, and hard-negative files written once — items in the world's batch format, so every recipe, loss and the trainer run on them unchanged.
- `hierbench.data.sources`: The source contract — a data description and a source function that return a map-style dataset for `collate_batch` — and the built-in world's source.
- `hierbench.evaluation.benchmarks`: `evaluate_benchmarks`: the built-in world and every compositional benchmark the arguments point at, in one flat dict with chance levels; the protocols live one family a module in `hierbench.evaluation.compositional`, and their old names still answer here.
- `hierbench.evaluation.compositional.aro`: ARO's four tasks: Visual Genome relations and attributions (a caption against its swapped version), and COCO- and Flickr-Order (a caption against four word-order perturbations).
- `hierbench.evaluation.compositional.bivlc`: BiVLC's test split read from the Hub's parquet files and scored as its evaluation script scores it: I2T, T2I and group scores, with the four one-direction verdicts (Ipos_2T, Ineg_2T, Tpos_2I, Tneg_2I), overall and per type.
- `hierbench.evaluation.compositional.choice`: The machinery SugarCrepe, VALSE, ARO, WhatsUp and CREPE share: an image and its caption options, each option scored in the model's own geometry, strict accuracy per subset with chance levels and the bag-of-words ceiling, and one row per item.
- `hierbench.evaluation.compositional.cola`: COLA's multi-object setting read from its released JSON — `[image, caption, image, caption]`, images given as URLs and found by file name — and scored as its evaluation script scores it: the image score, with the text and group scores beside it.
- `hierbench.evaluation.compositional.colorswap`: ColorSwap's test split — two captions with the same words, colours swapped, and their two images — scored as Winoground is: text, image and group scores.
- `hierbench.evaluation.compositional.common`: One evaluation's shared state — its image cache (each image decoded and encoded once, however many families name it), the items each family may score, where its lines go — the two-images-two-captions scoring five families use, and the dispatcher that runs every family asked for.
- `hierbench.evaluation.compositional.crepe`: CREPE's systematicity and productivity files as multiple-choice items: a caption against its hard negatives, accuracy and recall@1/3/5 per file.
- `hierbench.evaluation.compositional.eqben`: EqBen's released subsets — action genome, GEBC, YouCook2, Kubric (location, attribute, count) and Stable Diffusion — read from one JSON per subset and scored as its toolkit scores them: Winoground's text, image and group scores per subset.
- `hierbench.evaluation.compositional.hierarcaps`: HierarCaps' hierarchy measurements on real image-caption chains: hierarchical retrieval with its random baseline, d_corr with its caption-length baseline, and PEP (verified or, without negatives, unverified).
- `hierbench.evaluation.compositional.mmvp`: MMVP-VLM read from its released files and scored as its evaluation script scores it: consecutive rows paired, "a photo of " before each statement, each statement's choice between the pair's two images, categories by position (pair index // 15), pair accuracy per category and their average.
- `hierbench.evaluation.compositional.registry`: One table of every compositional benchmark family hierbench scores — its flags, its runner, where a data root keeps it, the metrics its per-item rows give — read by `hierbench eval`, the suites and these docs; torch-free, so `hierbench eval --help` stays fast.
- `hierbench.evaluation.compositional.spec`: SPEC's six subsets — count, relative and absolute size, relative and absolute spatial, existence — read from their folders and scored as its evaluation code scores them: image-to-text and text-to-image accuracy per subset (arg-max, ties to the first candidate) and their means.
- `hierbench.evaluation.compositional.sugarcrepe`: SugarCrepe's seven files scored as multiple-choice items (accuracy per file, per Replace/Swap/Add group, micro and macro), and SugarCrepe++'s image-to-text (ITT) and text-only (TOT) protocols with the bag-of-words shortcut beside them.
- `hierbench.evaluation.compositional.valse`: VALSE's foils as multiple-choice items: a caption and its foil per image, accuracy per piece and per linguistic phenomenon, micro and macro.
- `hierbench.evaluation.compositional.vl_checklist`: VL-CheckList read from the repository's own layout (corpus YAML files pointing into data JSON files, corpus.json's radar groups) and scored as its itc script scores it: first positive against first negative, strict, per file, per subtype as the radar averages, per type; absent images set aside and counted.
- `hierbench.evaluation.compositional.whatsup`: WhatsUp's spatial relations: its controlled images scored per image, per opposite pair and per set of four, and its COCO / Visual Genome question files as multiple-choice items.
- `hierbench.evaluation.compositional.winoground`: Winoground from its local dataset folder: text, image and group scores, overall and per tag, for Euclidean and Lorentz models, with one row per example for paired comparisons.
- `hierbench.evaluation.encoding`: Running a model on texts and images in batches, and the geometry of its head: radii, entailment angles, PEP on a model; a bag-of-words reference model that knows nothing about images.
- `hierbench.evaluation.hierarchy`: HyCoCLIP's hierarchical metrics of a classifier's mistakes — tree-induced error, LCA depth, Jaccard similarity, hierarchical precision and recall — over a real class hierarchy read from a local file or from WordNet.
- `hierbench.evaluation.item_metrics`: Every protocol's metrics recomputed from its per-item rows, with item-bootstrap intervals: one model's (the leaderboard) and the paired difference of two models on the same items (retention: fine-tune − base).
- `hierbench.evaluation.linear_probe`: Logistic regression on frozen image features, its weight decay chosen on a held-out part of train by CLIP_benchmark's coarse-to-fine sweep, refit on all of train and scored on test.
- `hierbench.evaluation.metrics`: Pure numpy metrics with their chance levels and shortcut baselines: recall@K, choice accuracy, ITT/TOT, bag-of-words and caption-length baselines, hierarchical classification metrics, PEP AUC/AP, d_corr, HierarCaps hierarchical retrieval.
- `hierbench.evaluation.retrieval`: Image–text retrieval on real files — COCO Karpathy 5k test, Flickr30k 1k test and CLIP_benchmark's retrieval WebDataset folders — scored as CLIP_benchmark scores it, for Euclidean and Lorentz models, with one row per query for paired comparisons.
- `hierbench.evaluation.suites`: Every general-capability protocol on one classification folder with its images encoded once (`evaluate_classification`), and the benchmarks ARGENT, DeGLA, READ and PHyCLIP tabulate — or every compositional family hierbench has, found in a folder of datasets and printed in each paper's layout (`hierbench eval --suite`).
- `hierbench.evaluation.world_eval`: The world's protocols and probes: zero-shot classification, retrieval, compositional accuracy, ITT/TOT, PEP and geometry on scenes whose truth is known; relation and position probes; per-item records and the scene bootstrap.
- `hierbench.evaluation.zeroshot`: Classification datasets from the files researchers have — CLIP_benchmark's WebDataset layout, a torchvision ImageFolder, ImageNet-1k's validation folder — their images encoded once per model, and zero-shot classification as CLIP_benchmark computes it, for Euclidean and Lorentz models.
- `hierbench.geometry`: The hyperboloid model every hyperbolic head, loss and plot in hierbench shares: one convention, stable formulas.
- `hierbench.layout`: Its wings in the order the data flows, the module paths that moved when the package was split into them, and the front door each wing package keeps.
- `hierbench.ledger.budgets`: A `Budget` fixes the steps, scenes, batches and seeds of one `hierbench compare` run; `BUDGETS` names the four the workbench ships (smoke, quick, standard, full), and `plan_runs` orders recipes so that every fine-tune comes after the checkpoint it starts from.
- `hierbench.ledger.claims`: The papers' claims as testable rows — recipe A against recipe B on one metric, in a stated direction, the two recipes differing in declared fields only — and the ledger that reads each row off paired differences over seeds (one 95% interval, or a group-sequential rule when seeds are added until a claim is decided), with an evaluation bootstrap over scenes, the power of the design and how fragile each verdict is.
- `hierbench.ledger.compare`: `hierbench compare` trains the papers' recipes on the built-in world, evaluates them, re-tests the papers' claims with seed and evaluation intervals and the smallest effect the design can detect, and writes a report.
- `hierbench.ledger.explain`: From a claim row of the ledger to its evidence: the paired seed differences behind it, where it stopped and why, which seed overturns it, and its effect broken down over what the world knows of each item.
- `hierbench.ledger.launchers`: Run a compare job's task graph: one task after another in this process, on a pool of spawned worker processes that each die with their parent, or as submitit jobs (local processes or SLURM) with preemption turned into a requeue that resumes exactly.
- `hierbench.ledger.progress`: What `hierbench compare` shows while it runs — runs done of the total, elapsed time and time left, a line per finished run and a heartbeat while runs train — estimated from recorded run costs scaled to this machine by a few timed steps, and refined as runs finish; a fastprogress bar in notebooks and terminals, everything printed by the parent process.
- `hierbench.ledger.records`: The claims ledger's records in the repository: every run's recipe, seed, settings hash, final metrics and the per-item rows the evaluation bootstrap reads — what `hierbench claims` recomputes `claims.json`, the README's table and the forest plot from, in seconds, with no checkpoint; and what a `compare --until-decided` continues from on any machine.
- `hierbench.ledger.report`: What `hierbench compare` shows: summary tables with chance levels and seed intervals, the learnability and saturation checks, the fine-tuning stages, the angles behind PEP, the claims ledger as a forest plot and a table, the papers' numbers beside ours, and `report.html` with static copies of its figures.
- `hierbench.ledger.reproduction`: Does this machine reproduce the committed ledger? Each run of a compare folder paired with its recorded twin (same recipe, seed and settings hash), the shift of every headline metric with its interval against an equivalence margin from the ledger's seed spread, and the ledger recomputed with this machine's seeds in place of the recorded ones.
- `hierbench.ledger.run_folder`: Where one run of a compare job lives, what it holds and when it is finished: its folder, its fingerprint, the reuse check, its per-item records and its result rows.
- `hierbench.ledger.run_graph`: A compare job's runs as tasks — a group of seeds of one recipe, or READ's decoder — and the tasks each one needs first.
- `hierbench.ledger.sweep`: `hierbench sweep RECIPE --grid FIELD=V1,V2,…`: one run per point of a grid and seed, through the compare job's launchers, and each point's effect against the base recipe with its interval — a dose-response table and figure.
- `hierbench.models.decoder`: READ's frozen caption decoder: a small word-level transformer decoder pretrained on the world's captions, the trainable projection from the text tower's pooled state, and an optional T5 adapter for real-scale runs.
- `hierbench.models.dual_encoder`: `DualEncoder`: two open_clip towers and a geometry head; `create_model` from an architecture name and a local checkpoint; reading checkpoints safely.
- `hierbench.models.family`: The model family in one place: every name of the towers, heads and dual encoder; saving and loading a model (LoRA runs included); DeGLA's EMA teacher.
- `hierbench.models.heads`: How projected tower features become embeddings and how two embeddings compare: `EuclideanHead` (cosine) and `LorentzHead` (MERU's lift onto the hyperboloid, −geodesic distance).
- `hierbench.models.lora`: Low-rank adapters (peft's LoRA) on a pretrained checkpoint's towers: which layers they adapt, the checkpoints that hold them alone, merging them into a plain model.
- `hierbench.models.onnx_export`: A hierbench model's two towers as ONNX graphs (`image.onnx`, `text.onnx`) with a `config.json` that says how to feed them; `onnx:DIR` scores benchmarks from them.
- `hierbench.models.precision`: open_clip's precision vocabulary — fp32, bf16, fp16, amp_bf16, amp_fp16 — for training, evaluation and the bench, with the geometry and heads kept in float32.
- `hierbench.models.scorers`: One contract for every model a benchmark scores — encode texts, encode images, the similarity in the model's own geometry — and adapters for the encoders researchers have: open_clip checkpoints, Hugging Face CLIP/SigLIP, sentence-transformers and other text encoders, hierbench runs.
- `hierbench.models.towers`: The architectures hierbench names (`ARCHS`) or open_clip knows, built as open_clip towers; the text tower's pooled state; the tokenizers.
- `hierbench.plugins`: A researcher's own loss terms, recipes and claims, in a Python file or module of theirs that hierbench loads by name (`--plugin`) in every process that needs it, and records by path and hash.
- `hierbench.recipes.losses`: Every training objective of the workbench: CLIP, MERU, HyCoCLIP, ARGENT, NegCLIP, DeGLA and READ — as small pure functions of embeddings.
- `hierbench.recipes.recipe_run`: `train_recipe`: a named recipe, a model and a source of batches, wired to the trainer — the one call behind `hierbench train` and `hierbench compare`.
- `hierbench.recipes.registry`: Named, composable training recipes — geometry, data fields, weighted loss terms, stage and optimizer defaults — and `compute_loss`, the glue the trainer calls.
- `hierbench.recipes.seed_batch`: `train_seeds`: K seeds of one recipe trained side by side in one process — each exactly as `train_recipe` trains it alone, sharing the world's item draws — with one ordinary run folder per seed.
- `hierbench.recipes.terms`: The names of the loss terms a recipe weighs: the built-in ones `compute_loss` computes, and a researcher's own, registered with `register_term(name, fn)` and computed from the step's embeddings.
- `hierbench.stats`: One implementation of each interval, effect, power and verdict rule the workbench reports: paired effects over training seeds with t-intervals, the smallest effect a design detects, the seeds a target half-width needs, the verdict rule of the claims ledger (a t-interval guarded against skewed seed noise), its group-sequential form for seeds added until a claim is decided, and fragile verdicts (leave one seed out).
- `hierbench.terminal`: What a command prints fits 100 columns: lines folded without cutting a path, tables cut to the columns that fit with a line saying where the rest is.
- `hierbench.training.callbacks`: The events a run tells its callbacks (`RunEvents`, one implementation for `train` and `train_seeds`) and the callbacks hierbench ships: `ValidationMonitor` with the plateau rule, `EvalEvery`.
- `hierbench.training.checkpoints`: Atomic checkpoint folders that resume a run exactly: weights as safetensors, optimizer/scheduler/RNG state loadable with `weights_only=True`, and `latest.json` as the commit point.
- `hierbench.training.distributed`: Several processes, one global batch: rank information, sharding, a differentiable all-gather that keeps the hard-negative layout, and gradient averaging.
- `hierbench.training.metrics_log`: `metrics.jsonl`, a run's log of what it measured: one JSON object a line, appended as the run goes; read back without importing the trainer.
- `hierbench.training.tracking`: Every metrics line of a run also in TensorBoard and W&B (`--report-to`), with the norm distribution of the embeddings drawn at evaluation steps.
- `hierbench.training.train_config`: `TrainConfig`, every number that decides a training run, and the optimiser it builds: AdamW's parameter groups and the warmup + cosine schedule.
- `hierbench.training.trainer`: One trainer for every recipe: AdamW with parameter groups, warmup + cosine, clipping, bf16 on CUDA, EMA teacher, NaN guard, JSON-lines metrics, atomic checkpoints, bit-exact resume, and multi-process contrastive training.
- `hierbench.ui.side_by_side`: The two arms of a ledger row over the same items: both embeddings laid out by the same method with linked selection, their norms by hierarchy level and their entailment angles in one figure, and one HyperView workspace holding both spaces.
- `hierbench.ui.view`: `hierbench view`: a HyperView workspace of what a model makes of images and texts — HoroPCA's Poincaré layout and a Euclidean one from hierbench's own geometry, norms and parent captions as fields — served locally or exported as a static bundle.
- `hierbench.ui.widgets`: ipywidgets explorers over the figures: the entailment-angle explorer and the `compare` run browser.
- `hierbench.viz.figures`: HoroPCA, PCA and UMAP views of embeddings, norm distributions, entailment-cone diagrams, training curves and sweep bars: pure functions that return plotly figures.
- `hierbench.viz.horopca`: HoroPCA (Chami et al., 2021): the few Poincaré-ball operations it needs (Möbius addition, distance, Fréchet mean, Busemann functions, horospherical projection), the fit itself, and a synthetic tree to look at.
- `hierbench.viz.world_figures`: The built-in world drawn: scene grids with their captions, a scene beside its crops, a taxonomy as a tree.
- `hierbench.world.hard_negatives`: The world's verified hard negatives: eight edit types of a scene's most specific caption, each candidate checked false against the scene's objects; and the audit that sorts any generator's negatives into valid hard, easy and hard positives.
- `hierbench.world.language`: The built-in world's vocabulary and language: taxonomies, noun phrases and clauses, render and parse, truth on a scene's objects, entailment and specificity.
- `hierbench.world.scenes`: A procedurally generated image-text universe with a known hierarchy and exact truth: scenes, caption chains, phrases and crops, paraphrases, alternatives, verified hard negatives, splits and an on-disk cache."""

__version__ = "0.2.0"

from hierbench.layout import install_moved_finder

install_moved_finder()

# name -> the module that defines it (one line each; tests/ground/test_front_door.py checks every one resolves)
_FRONT_DOOR = {
    "create_model": "hierbench.models.dual_encoder",  # a DualEncoder from an architecture name (+ local checkpoint)
    "load_model": "hierbench.models.family",  # rebuild a model saved by hierbench
    "get_recipe": "hierbench.recipes.registry",  # a named recipe: model head, data fields, weighted losses
    "list_recipes": "hierbench.recipes.registry",
    "register_recipe": "hierbench.recipes.registry",  # your own recipe (a plugin's, `hierbench.plugins`)
    "register_term": "hierbench.recipes.terms",  # your own loss term: fn(inputs) -> scalar tensor
    "register_claim": "hierbench.ledger.claims",  # your own row of the claims ledger
    "Claim": "hierbench.ledger.claims",
    "train_recipe": "hierbench.recipes.recipe_run",  # recipe + model + data + trainer
    "WorldData": "hierbench.data.sources",  # the built-in world as training data
    "RealData": "hierbench.data.real_data",  # COCO / GRIT / WebDataset shards as training data
    "evaluate_world": "hierbench.evaluation.world_eval",  # the world's protocols and probes
    "evaluate_benchmarks": "hierbench.evaluation.benchmarks",  # SugarCrepe(++), HierarCaps, VALSE, ... local files
    "run_compare": "hierbench.ledger.compare",  # the main job: every recipe x seeds, the claims ledger, the report
    "explain": "hierbench.ledger.explain",  # the evidence behind a claim's rows: seeds, looks, items
    "exp_map0": "hierbench.geometry",  # Lorentz geometry
    "dist": "hierbench.geometry",
    "holds": "hierbench.world.language",  # is a sentence of the world's language true of a scene?
}

__all__ = list(_FRONT_DOOR)


def __getattr__(name: str):
    "Load a front-door name from its module on first access (PEP 562); submodules import as usual."
    module = _FRONT_DOOR.get(name)
    if module is None:
        raise AttributeError(f"module 'hierbench' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
