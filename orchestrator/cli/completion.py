"""`berth completion bash|zsh`: shell completion of every command, subcommand and flag.

The script is written from the parser itself, so it never drifts from the commands: a table of the words
each command path takes, and one function that walks the words typed so far to find the path. zsh runs
the same function through its bash compatibility.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable

_FUNCTION = """_berth() {
  local cur="${COMP_WORDS[COMP_CWORD]}" path="berth" word i
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="${COMP_WORDS[i]}"
    [[ $word == -* ]] && continue
    case " ${_berth_commands[$path]} " in *" $word "*) path="$path $word" ;; esac
  done
  COMPREPLY=($(compgen -W "${_berth_words[$path]}" -- "$cur"))
}
complete -F _berth berth
"""
_ZSH_PRELUDE = "autoload -U +X bashcompinit && bashcompinit\n"


def register(subparsers: argparse._SubParsersAction, root: Callable[[], argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("completion", help='print a shell completion script: eval "$(berth completion bash)"')
    p.add_argument("shell", choices=("bash", "zsh"))

    def cmd_completion(args: argparse.Namespace) -> int:
        print(script(root(), args.shell), end="")
        return 0

    p.set_defaults(func=cmd_completion)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    commands: dict[str, list[str]] = {}
    words: dict[str, list[str]] = {}
    _walk(parser, "berth", commands, words)  # bash keys cannot be empty: the root is "berth"
    table = "".join(
        f"_berth_commands[{shlex.quote(path)}]={shlex.quote(' '.join(commands.get(path, [])))}\n"
        f"_berth_words[{shlex.quote(path)}]={shlex.quote(' '.join(words[path]))}\n"
        for path in sorted(words)
    )
    body = f"declare -gA _berth_commands _berth_words\n{table}{_FUNCTION}"
    return (_ZSH_PRELUDE if shell == "zsh" else "") + body


def _walk(
    parser: argparse.ArgumentParser, path: str, commands: dict[str, list[str]], words: dict[str, list[str]]
) -> None:
    here: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            names = sorted(action.choices)
            commands[path] = names
            here.extend(names)
            for name, sub in action.choices.items():
                _walk(sub, f"{path} {name}", commands, words)
        else:
            here.extend(option for option in action.option_strings if option.startswith("--"))
    words[path] = here
