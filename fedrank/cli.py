"""The ``fedrank`` console script: one subcommand per job, each in fedrank.commands."""

from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> (module in fedrank.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("simulate", "run the paper's simulation (section 5.1)"),
    "frecency": ("frecency", "print frecency values of a places.sqlite"),
    "aggregator": ("aggregator", "run the aggregator"),
    "participant": ("participant", "run one or many participants"),
    "rounds": ("rounds", "show the aggregator's round log"),
    "evaluate": ("evaluate", "held-out characters typed and rank under a trained model"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedrank", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, (module_name, help_text) in COMMANDS.items():
        try:
            module = importlib.import_module(f"fedrank.commands.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"fedrank.commands.{module_name}":
                raise
            continue
        modules[name] = module
        module.add_arguments(sub.add_parser(name, help=help_text, description=module.__doc__))
    args = parser.parse_args(argv)
    result: int = modules[args.command].run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
