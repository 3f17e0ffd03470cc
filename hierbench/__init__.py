"""A notebook-first workbench for hierarchical and compositional image-text representations (ARGENT, DeGLA, READ, CLIP, MERU, HyCoCLIP, NegCLIP)"""

__version__ = "0.1.0"
