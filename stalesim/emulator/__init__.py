"""The delay-buffer emulator: exact staleness of any schedule, on one device.

``from stalesim.emulator.replay import Emulator, emulate``; see docs/emulator.md.
"""
