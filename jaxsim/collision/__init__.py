"""Collision detection (MuJoCo's mj_collision): pair selection, narrow phase, contacts."""
