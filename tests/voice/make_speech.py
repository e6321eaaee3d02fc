"""Make the spoken test utterances once: ``python tests/voice/make_speech.py``.

The tests stream these WAVs (16 kHz, 16-bit, mono) to a real ``vrt serve`` as a
microphone would. They were made with Debian's ``espeak-ng`` (``apt-get install espeak-ng
sox``): a synthesiser unrelated to the speech recogniser and to Piper, in several voices
and speeds, so that the recogniser is judged on speech it was not built around. Run it
again only to change the corpus; ``manifest.json`` records each file's words.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).parent / "speech"

#: (words, espeak-ng voice, words per minute)
UTTERANCES = [
    ("what time is it", "en-us", 150),
    ("please add milk and eggs to the shopping list", "en-us+m3", 150),
    ("turn on the lights in the kitchen", "en-us+f2", 150),
    ("how is the weather today", "en-us", 160),
    ("set a timer for ten minutes", "en-us+m1", 150),
    ("play some music in the living room", "en-us+f3", 150),
    ("what is the capital of france", "en-us", 150),
    ("remind me to call my mother tomorrow", "en-us+m3", 150),
    ("open the garage door", "en-us+f2", 150),
    ("how many days are left until friday", "en-us", 150),
    ("book a table for two at seven", "en-us+m1", 150),
    ("send a message to the team", "en-us+f3", 160),
    ("what is on my calendar this afternoon", "en-us", 150),
    ("turn the volume down please", "en-us+m3", 150),
    ("tell me a short story about a dragon", "en-us+f2", 150),
    ("how far is the nearest train station", "en-us", 150),
    ("echo hello world", "en-us", 150),
    ("stop the music", "en-us+m1", 150),
    ("what is twelve times eight", "en-us+f3", 150),
    ("good morning how are you", "en-us", 160),
    ("find a recipe for pancakes", "en-us+m3", 150),
    ("close the window in the bedroom", "en-us+f2", 150),
    ("call a taxi to the airport", "en-us", 150),
    ("read me the news headlines", "en-us+m1", 150),
]


def main() -> None:
    HERE.mkdir(exist_ok=True)
    manifest = {}
    with tempfile.TemporaryDirectory() as tmp:
        for index, (words, voice, wpm) in enumerate(UTTERANCES):
            raw = Path(tmp) / "raw.wav"
            name = f"u{index:02d}.wav"
            subprocess.run(
                ["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(raw), words], check=True
            )
            # 16 kHz mono 16-bit, leading and trailing silence trimmed (the tests add
            # their own), peak normalised to -3 dBFS.
            trim = "silence 1 0.02 0.5% reverse silence 1 0.02 0.5% reverse norm -3".split()  # noqa: SIM905
            subprocess.run(
                ["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(HERE / name), *trim],
                check=True,
            )
            manifest[name] = words
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
