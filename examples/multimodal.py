"""Seeds, "Multimodal Input": a prompt made of Anthropic content blocks (text and an image)."""

from __future__ import annotations

import asyncio
import base64
import struct
import zlib

from _demo import model_options

from agent_lattice import create_agent
from agent_lattice.testing import RecordedRequest, Reply, text


def tiny_png(width: int = 2, height: int = 2) -> bytes:
    """A valid RGB PNG, all red, built in memory."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def fake(request: RecordedRequest) -> Reply:
    content = request.messages[-1]["content"]
    images = [b for b in content if isinstance(b, dict) and b.get("type") == "image"]
    if not images:
        return text("I received no image.")
    png = base64.b64decode(images[0]["source"]["data"])
    width, height = struct.unpack(">II", png[16:24])  # from the IHDR chunk
    signature_ok = png.startswith(b"\x89PNG\r\n\x1a\n")
    media_type = images[0]["source"]["media_type"]
    return text(
        f"Asked {request.last_user_text!r} about a {width}x{height} {media_type} image "
        f"({len(png)} bytes, PNG signature ok: {signature_ok})."
    )


agent = create_agent(**model_options("multimodal", fake))


async def main() -> None:
    image_base64 = base64.b64encode(tiny_png()).decode()
    result = await agent.prompt(
        [
            {"type": "text", "text": "Summarize this screenshot."},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": image_base64},
            },
        ]
    )
    print(result.result)
    first = (await agent.get_history())[0]
    print("stored prompt blocks:", [b.type for b in first.blocks])


if __name__ == "__main__":
    asyncio.run(main())
