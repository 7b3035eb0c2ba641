"""nbagent: a Jupyter-native LLM agent whose every step is recorded in a verifiable log beside the notebook.

Importing the package is cheap on purpose: no litellm, IPython or widget import happens here.
"""

from ._version import __version__

__all__ = ["__version__"]
