# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What endpoint_verify's checks send (private to this collection): the prompts, the
get_weather tool, the built-in image, the long-context prompt and the token estimates that keep
budgets inside max_model_len.  _cost_report prices the same requests from these."""

from __future__ import annotations

import base64
import struct
import zlib

from ansible_collections.gpufleet.serving.plugins.module_utils._openai_chat import text_of

CHARS_PER_TOKEN = 4
# Smallest room (tokens) worth clamping max_tokens to when max_model_len is known.
_MIN_ROOM = 16

DEFAULT_CHAT_PROMPT = "What is the capital of France? Answer in one short sentence."
REASONING_PROMPT = "A train leaves at 14:10 and arrives at 16:45. How long is the trip? Think it through, then answer briefly."
FOLLOW_UP_PROMPT = "Now say the same thing in at most five words."
TOOL_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."
IMAGE_PROMPT = "What colour is this image? Answer with one word."
LONG_CONTEXT_CODE = "7341"

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name, for example Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": WEATHER_PARAMETERS,
    },
}
WEATHER_CHOICE = {"type": "function", "function": {"name": "get_weather"}}


def solid_png(width, height, rgb):
    """A valid, uncompressed-colour PNG of one colour (8-bit RGB)."""
    row = b"\x00" + bytes(bytearray(rgb)) * width

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * height, 9)) + chunk(b"IEND", b"")


def png_data_url(png):
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


# 64x64 pixels: big enough for vision encoders with a minimum image size (patches of 14-16 px).
DEFAULT_IMAGE_DATA_URL = png_data_url(solid_png(64, 64, (220, 20, 20)))


def estimate_tokens(text):
    """Tokens in ``text`` at about CHARS_PER_TOKEN characters a token."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def estimate_prompt_tokens(messages):
    """A generous estimate of a chat prompt's tokens (template overhead included), used only
    to keep max_tokens inside max_model_len."""
    total = 32
    for message in messages:
        text = text_of(message.get("content"))
        total += 16 + (estimate_tokens(text) * 5 + 3) // 4
        if isinstance(message.get("content"), list):
            total += 256 * sum(1 for part in message["content"] if isinstance(part, dict) and part.get("type") == "image_url")
    return total


def long_prompt(tokens):
    """A prompt of about ``tokens`` tokens: numbered filler lines with one fact in the
    middle and a question about it at the end."""
    question = "\nWhat is the verification code mentioned above? Answer with the number only."
    fact = "Note: the verification code is %s.\n" % LONG_CONTEXT_CODE
    target = max(tokens * CHARS_PER_TOKEN - len(question) - len(fact), 0)
    lines = []
    size = 0
    number = 0
    while size < target:
        number += 1
        line = "Line %d: the servers in rack %d report normal temperature and steady power draw.\n" % (number, number % 40)
        lines.append(line)
        size += len(line)
    lines.insert(len(lines) // 2, fact)
    return "".join(lines) + question


def token_budgets(max_tokens, max_tokens_ceiling, max_model_len, messages):
    """``(first budget, ceiling, note)``; both kept inside max_model_len when it is known."""
    start = max_tokens
    ceiling = max(max_tokens_ceiling, start)
    note = None
    if max_model_len:
        room = max_model_len - estimate_prompt_tokens(messages)
        if room >= _MIN_ROOM:
            ceiling = min(ceiling, room)
            if start > room:
                note = "max_tokens lowered from %d to %d to fit max_model_len %d" % (start, room, max_model_len)
                start = room
    return start, ceiling, note
