"""The audit command's options are declared once: the command line, a configuration file read by the CLI and
the same file read by the Python API give the same values, checked the same way."""

from __future__ import annotations

import dataclasses
import os

import click
import pytest

from gradaudit import audit
from gradaudit.api import _from_config
from gradaudit.cli import audit_command, merge_command
from gradaudit.errors import GradauditError
from gradaudit.options import AuditRun


def test_the_run_object_has_one_field_per_option():
    assert [f.name for f in dataclasses.fields(AuditRun)] == [p.name for p in audit_command.params if p.expose_value]


def test_audit_and_merge_share_their_report_options():
    audit_params = {p.name: p for p in audit_command.params}
    shared = [p for p in merge_command.params if isinstance(p, click.Option)]
    assert {p.name for p in shared} == {"fmt", "output", "json_path", "sarif_path", "junit_path", "markdown_path",
                                        "html_path", "fail_on", "exit_zero", "debug"}
    for p in shared:
        twin = audit_params[p.name]
        assert (p.opts, p.secondary_opts, p.default, p.type.to_info_dict()) == (
            twin.opts, twin.secondary_opts, twin.default, twin.type.to_info_dict()), p.name
    assert "the merged report" in next(p.help for p in shared if p.name == "fmt")


def test_a_configuration_file_means_the_same_to_the_cli_and_the_api(tmp_path):
    (tmp_path / "in.npz").write_bytes(b"")
    cfg = tmp_path / "gradaudit.toml"
    cfg.write_text('tag = "serve,gpu"\nsignature = "f"\nseed = 7\nbatch-size = 3\nshape = ["x=3,5"]\n'
                   'probe-scales = "1,100"\norder = 2\ntimeout = 30\nload-ops = ["ops/libx.so"]\n'
                   'inputs = "in.npz"\nselect = "GA1,GA3"\nignore-ops = {zero-gradient = ["Arg*"]}\n')
    ctx = audit_command.make_context("audit", ["model", "--config", str(cfg)])
    run = AuditRun(**ctx.params)
    from_api = _from_config(cfg)  # what audit(config=...) reads
    assert set(from_api) == {"tags", "signature", "seed", "batch_size", "shapes", "probe_scales", "order",
                             "timeout", "load_ops", "inputs_file", "select", "ignore_ops"}
    for name, value in from_api.items():
        assert getattr(run, name) == value, name
    assert from_api["tags"] == ("serve", "gpu") and from_api["shapes"] == {"x": (3, 5)}
    assert from_api["probe_scales"] == (1.0, 100.0) and from_api["timeout"] == 30.0
    # paths in a file are relative to the file, a shared library's too
    assert from_api["inputs_file"] == str(tmp_path / "in.npz")
    assert from_api["load_ops"] == (os.path.join(tmp_path, "ops/libx.so"),)


@pytest.mark.parametrize("body, message", [
    ('seed = "seven"\n', "seed: 'seven' is not a valid integer"),
    ("order = 3\n", "order: 3 is not in the range"),
    ('shape = ["x"]\n', "shape: 'x': expected NAME=D0,D1,..."),
    ('select = "GA9"\n', "select: unknown rule 'GA9'"),
    ("jobs = 2\n", "key 'jobs' is not read by the Python API"),
    ("colour = true\n", "unknown key 'colour'"),
    ("allow-unsafe-ops = true\n", "cannot be set in a configuration file"),
])
def test_the_api_checks_a_configuration_file_as_the_cli_does(samples, tmp_path, body, message):
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text("[tool.gradaudit]\n" + body)
    with pytest.raises(GradauditError) as raised:
        audit(os.path.join(samples, "mlp"), config=cfg, static_only=True)
    assert str(raised.value).startswith(f"{cfg.resolve()} [tool.gradaudit]: ") and message in str(raised.value)
