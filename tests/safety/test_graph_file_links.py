"""A graph file is the model's own: `saved_model.pb(txt)` that is a link to a file outside the model folder is
refused before it is read (a token file would have been parsed, and its first word shown in the error), and a
parse error never quotes the text it failed on."""

from __future__ import annotations

import os

import pytest

from gradaudit.errors import GradauditError
from gradaudit.targets.saved_model import SavedModelFile

SECRET = "ghp_canaryTOKEN1234567890abcdef"


@pytest.mark.parametrize("name", ["saved_model.pbtxt", "saved_model.pb"])
def test_a_graph_file_linked_outside_the_folder_is_not_read(tmp_path, name):
    (tmp_path / "token").write_text(SECRET + "\n")
    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    os.symlink(tmp_path / "token", model / name)
    with pytest.raises(GradauditError) as err:
        SavedModelFile(str(model))
    assert "it is a link to a file outside the model folder" in str(err.value) and SECRET not in str(err.value)


def test_a_link_inside_the_folder_is_read(tmp_path, samples):
    model = tmp_path / "model"
    model.mkdir()
    (model / "graph").mkdir()
    (model / "graph" / "real.pb").write_bytes((open(os.path.join(samples, "mlp", "saved_model.pb"), "rb")).read())
    os.symlink(model / "graph" / "real.pb", model / "saved_model.pb")
    assert SavedModelFile(str(model)).signature_keys()


def test_a_parse_error_does_not_quote_the_file(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "saved_model.pbtxt").write_text(f"{SECRET}: 1\n")
    with pytest.raises(GradauditError) as err:
        SavedModelFile(str(model))
    assert "cannot be parsed (ParseError at line 1, column" in str(err.value) and SECRET not in str(err.value)
