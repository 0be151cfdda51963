"""Counting a self-hosted model's prompts with its own tokenizer, as its engine counts them.

    tokenizers = tokenizers_under(data_dir)           # one per process and data dir
    tokenizer = tokenizers.for_entry(entry)     # None: counted by litellm (hosted, simulated models)
    count_prompt(messages, tools, tokenizer)    # activities.step.tokens: PromptCount(tokens, exact)

Modules: `gguf` reads a GGUF file's metadata from a stream; `vocab` builds the `tokenizers.Tokenizer`
from it (or from a tokenizer.json); `counting` renders the chat template and counts; `files` reads the
tokenizer from the entry's origin into the data dir; `registry` loads each once per process.
"""

from .counting import ModelTokenizer
from .files import TokenizerFiles
from .registry import ModelTokenizers, tokenizers_under
from .vocab import TokenizerUnreadable

__all__ = ["ModelTokenizer", "ModelTokenizers", "TokenizerFiles", "TokenizerUnreadable", "tokenizers_under"]
