"""Audio devices for the live commands: importing PortAudio's binding with a useful error, and
reading ``--device`` values (torch-free)."""

from __future__ import annotations


def sounddevice_or_exit(command: str, alternative: str, error: type[SystemExit] = SystemExit):
    """The ``sounddevice`` module, or ``error`` saying how to install PortAudio and what else to try."""
    try:
        import sounddevice as sd
    except OSError as e:  # the PortAudio library itself is missing
        raise error(
            f"{command} needs PortAudio ({e}); install it (apt-get install libportaudio2) or {alternative}"
        ) from None
    return sd


def parse_device(value: str | None) -> int | str | None:
    """A ``--device`` value: an index when it is a number (sounddevice would match it as a name)."""
    return int(value) if value and value.isdigit() else value


def input_device(sd, value: str | None, no_microphone) -> tuple[int | str | None, dict, int]:
    """The ``--device`` microphone: ``(device, its description, its native rate)``.

    ``no_microphone(exception)`` builds the error raised when there is no such (or no) input device.
    """
    device = parse_device(value)
    try:
        info = sd.query_devices(device, "input")
    except (ValueError, sd.PortAudioError) as e:
        raise no_microphone(e) from None
    return device, info, int(info["default_samplerate"])
