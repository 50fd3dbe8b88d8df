"""The command line: `python -m jaxsim simulate` (the main job) and `check`."""

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


def test_simulate_writes_plot_and_states(tmp_path, capsys):
    import numpy as np

    out = tmp_path / "out"
    args = ["simulate", str(MODELS / "pendulum.xml"), "--batch", "2", "--steps", "5",
            "--out", str(out), "--no-cache", "--ctrl", "random", "--seed", "3"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "compiled in" in text and "steps/s" in text
    assert (out / "simulate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    final = np.load(out / "final_state.npz")
    assert final["qpos"].shape == (2, 1) and np.allclose(final["time"], 5 * 0.002)
    assert final["qpos"][0, 0] != final["qpos"][1, 0]  # per-world noise
    traj = np.load(out / "trajectory.npz")
    assert traj["root_height"].shape == traj["kinetic_energy"].shape == (2, 5)


def test_simulate_chunking():
    from jaxsim.simulate import _chunking

    assert _chunking(200, 10) == (20, 0)
    assert _chunking(5, 10) == (1, 0)
    assert _chunking(7, 3) == (3, 1)  # 3 + 3 + 1
