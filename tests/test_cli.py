"""The README's main job: `python -m jaxsim check MODEL.xml`."""

from conftest import MODELS

from jaxsim.__main__ import main


def test_check_prints_summary(capsys):
    assert main(["check", str(MODELS / "cartpole.xml")]) == 0
    out = capsys.readouterr().out
    assert "nq=2, nv=2, nu=1" in out and "slide" in out and "hinge" in out


def test_check_reports_errors(tmp_path, capsys):
    bad = tmp_path / "bad.xml"
    bad.write_text("<mujoco><worldbody><geom size='1' colour='red'/></worldbody></mujoco>")
    assert main(["check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "colour" in err and "bad.xml:1" in err
