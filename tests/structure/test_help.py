"""``lockbuild --help`` lists every command under its role, and every command's help carries an
example that parses as written (its arguments and options, with click's own parser, nothing resilient)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from lockbuild.cli import ROLES, main

FILE_SUFFIXES = (".lbz", ".toml", ".key", ".pub", ".minisig", ".pem", ".crt")


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


ALL = list(_commands(main))


def _sections(text: str) -> dict[str, list[str]]:
    """The help's command sections: title -> the command names listed under it."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = out.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  ") and not line.startswith("   ") and line.strip():
            current.append(line.split()[0])
        elif not line.strip():
            current = None
    return out


def test_every_command_has_a_role() -> None:
    placed = [name for _, names in ROLES for name in names]
    assert len(placed) == len(set(placed)), "a command is listed under two roles"
    assert sorted(placed) == sorted(main.commands), "give each command a role in lockbuild/cli.py ROLES"


def test_top_level_help_lists_the_commands_by_role() -> None:
    text = CliRunner().invoke(main, ["--help"], terminal_width=100).stdout
    sections = _sections(text)
    for title, names in ROLES:
        assert sections.get(title) == list(names), (title, sections)
    assert "Commands" not in sections  # no alphabetical list besides
    site = sections["Site and store (between the builder and the nodes)"]
    assert {"import", "store", "delta", "split", "push", "pull"} == set(site)


def test_a_command_without_a_role_still_shows_under_other(monkeypatch: pytest.MonkeyPatch) -> None:
    @click.command("newthing")
    def newthing() -> None:
        """Something someone added."""

    monkeypatch.setitem(main.commands, "newthing", newthing)
    text = CliRunner().invoke(main, ["--help"]).stdout
    assert _sections(text)["Other commands"] == ["newthing"]
    assert "Something someone added." in text


def _example(command: click.Command) -> str:
    lines = [line for line in (command.epilog or "").splitlines() if line.startswith("Example: lockbuild ")]
    assert len(lines) == 1, f"expected one 'Example: lockbuild ...' line in the epilog, found {lines}"
    return lines[0].removeprefix("Example: ")


@pytest.mark.parametrize(("path", "command"), ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_command_has_an_example_that_parses(
    path: tuple[str, ...], command: click.Command, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = shlex.split(_example(command), comments=True)
    assert argv[0] == "lockbuild" and tuple(argv[1 : 1 + len(path)]) == path, argv
    monkeypatch.chdir(tmp_path)
    for arg in argv[1:]:  # the files the example names (a parameter may demand that they exist)
        if not arg.startswith(("-", "/", "~")) and "://" not in arg and arg.endswith(FILE_SUFFIXES):
            (tmp_path / arg).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / arg).touch()
    # The real command line, parsed strictly by click as the shell would hand it over; only the command's
    # body is replaced, by one that records what it was given.
    called: list[tuple[click.Command, dict[str, object]]] = []
    for _, each in ALL:
        monkeypatch.setattr(each, "callback", lambda each=each, **kw: called.append((each, kw)))
    main.main(argv[1:], prog_name="lockbuild", standalone_mode=False)
    leaf = called[-1][0]
    if isinstance(command, click.Group):
        assert leaf in command.commands.values(), f"the example runs {leaf.name}, not a {path} subcommand"
    else:
        assert leaf is command, f"the example runs {leaf.name}"


def test_the_example_shows_in_each_commands_help() -> None:
    for path, command in ALL:
        text = CliRunner().invoke(main, [*path, "--help"], terminal_width=80).stdout
        assert _example(command) in text, path


def test_a_broken_example_fails_the_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above is real: an unknown option, a missing argument or a bad value is refused."""
    monkeypatch.setattr(main.commands["lock"], "callback", lambda **kw: None)
    for argv in (["lock", "x.toml", "--out", "d", "--no-such"], ["lock", "x.toml"], ["lock", "a", "b", "--out", "d"]):
        with pytest.raises(click.UsageError):
            main.main(argv, prog_name="lockbuild", standalone_mode=False)


def test_every_command_says_what_it_does() -> None:
    """A docstring built by concatenation is no docstring: click would list the command with no text."""
    import click

    from lockbuild.cli import main

    def walk(group: click.Group) -> list[tuple[str, click.Command]]:
        out = []
        for name, cmd in group.commands.items():
            out.append((name, cmd))
            if isinstance(cmd, click.Group):
                out += [(f"{name} {n}", c) for n, c in walk(cmd)]
        return out

    empty = [name for name, cmd in walk(main) if not (cmd.help or "").strip()]
    assert empty == []


def test_each_summary_is_a_whole_sentence_that_fits_the_line() -> None:
    """``lockbuild --help`` at 80 columns: every command's line is its own short sentence, never a
    docstring cut with "..."; and so is each group's subcommand list."""
    for path, command in [((), main), *[(p, c) for p, c in ALL if isinstance(c, click.Group)]]:
        text = CliRunner().invoke(main, [*path, "--help"], terminal_width=80).stdout
        assert isinstance(command, click.Group)
        for name, sub in command.commands.items():
            line = next(x for x in text.splitlines() if x.split()[:1] == [name])
            summary = line.split(None, 1)[1]
            assert sub.short_help == summary, (path, name, line)
            assert summary.endswith(".") and not summary.endswith("...") and summary[0].isupper(), line
            assert len(line) <= 80, line


@pytest.mark.parametrize("width", [50, 60, 80, 100])
@pytest.mark.parametrize(("path", "command"), ALL, ids=[" ".join(p) for p, _ in ALL])
def test_usage_lines_never_cut_a_word(path: tuple[str, ...], command: click.Command, width: int) -> None:
    """The usage lines hold the same words as the command's usage pieces, each whole (click's wrapping
    cut ENGINE/VERSION-VARIANT at the hyphen and inside the word)."""
    text = CliRunner().invoke(main, [*path, "--help"], terminal_width=width, prog_name="lockbuild").stdout
    usage = text.split("\n\n", 1)[0].removeprefix("Usage: ").split()
    ctx = click.Context(command, info_name=path[-1])
    words = " ".join(command.collect_usage_pieces(ctx)).split()
    assert usage == ["lockbuild", *path, *words], text


def test_the_program_is_lockbuild_from_python_m_and_the_console_script() -> None:
    import subprocess
    import sys

    script = Path(sys.executable).parent / "lockbuild"
    for argv in ([sys.executable, "-I", "-m", "lockbuild"], [str(script)]):
        usage = subprocess.run([*argv, "list", "--help"], capture_output=True, text=True, check=False)
        assert usage.returncode == 0 and usage.stdout.startswith("Usage: lockbuild list [OPTIONS]"), usage
        for shell, marker in (
            ("bash", "_lockbuild_completion"),
            ("zsh", "#compdef lockbuild"),
            ("fish", "complete --no-files --command lockbuild"),
        ):
            got = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                check=False,
                env={"PATH": "/usr/bin:/bin", "_LOCKBUILD_COMPLETE": f"{shell}_source"},
            )
            assert got.returncode == 0 and marker in got.stdout, (argv, shell, got.stdout[:200], got.stderr)
        words = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=False,
            env={
                "PATH": "/usr/bin:/bin",
                "_LOCKBUILD_COMPLETE": "bash_complete",
                "COMP_WORDS": "lockbuild ins",
                "COMP_CWORD": "1",
            },
        )
        assert sorted(words.stdout.split()) == ["plain,inspect", "plain,install"], words


def test_dash_capital_v_prints_what_version_prints() -> None:
    long = CliRunner().invoke(main, ["--version"])
    short = CliRunner().invoke(main, ["-V"])
    assert short.exit_code == long.exit_code == 0 and short.stdout == long.stdout and "lockbuild" in long.stdout


def test_json_before_the_command_prints_what_json_after_it_prints(tmp_path: Path) -> None:
    root = tmp_path / "engines"
    root.mkdir()
    missing = tmp_path / "absent.lbz"
    for tail in (["list", "--root", str(root)], ["verify", str(missing), "--trust", str(tmp_path)]):
        first = CliRunner().invoke(main, ["--json", *tail])
        last = CliRunner().invoke(main, [*tail, "--json"])
        assert (first.exit_code, first.stdout) == (last.exit_code, last.stdout), (first.output, last.output)
        assert first.stdout.lstrip().startswith("{"), first.output
        assert "ok" in __import__("json").loads(first.stdout)


def test_verbose_and_quiet_before_or_after_the_command(tmp_path: Path) -> None:
    for argv in (["-v", "verify", "x.lbz"], ["verify", "x.lbz", "-v"]):
        r = CliRunner().invoke(main, [*argv, "--trust", str(tmp_path)])
        assert "Traceback" in r.stderr or r.exit_code != 0, r.output
    for argv in (["-q", "list"], ["list", "-q"]):
        root = tmp_path / "engines"
        root.mkdir(exist_ok=True)
        r = CliRunner().invoke(main, [*argv, "--root", str(root)])
        assert r.exit_code == 0 and r.stderr == "", r.output
