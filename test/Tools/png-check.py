"""Prints a PNG's size and how many distinct colours its pixels take, and
fails when the image is nearly blank (under 16 colours): the check of a
rendered moe-report page. Standard library only (zlib for the pixels).

usage: png-check.py FILE.png
"""
import struct
import sys
import zlib


def main(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit("%s: not a PNG" % path)
    pos, chunks, idat = 8, {}, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IDAT":
            idat += body
        else:
            chunks.setdefault(kind, body)
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    channels = {2: 3, 6: 4}.get(colour)
    if depth != 8 or not channels:
        sys.exit("%s: expected 8-bit RGB or RGBA, got depth %d colour type %d" % (path, depth, colour))
    raw = zlib.decompress(idat)
    stride, colours, prev = width * channels, set(), bytearray(width * channels)
    for y in range(height):
        line = raw[y * (stride + 1):(y + 1) * (stride + 1)]
        kind, row = line[0], bytearray(line[1:])
        for i in range(stride):  # undo the row filter
            left = row[i - channels] if i >= channels else 0
            up, ul = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                row[i] = (row[i] + left) & 255
            elif kind == 2:
                row[i] = (row[i] + up) & 255
            elif kind == 3:
                row[i] = (row[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - ul
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                row[i] = (row[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else ul)) & 255
        if y % 4 == 0:  # every 4th row is enough to count colours
            colours.update(bytes(row[i:i + 3]) for i in range(0, stride, channels * 2))
        prev = row
    print("%d x %d pixels, %d colours" % (width, height, len(colours)))
    if len(colours) < 16:
        sys.exit("%s: nearly blank (%d colours)" % (path, len(colours)))


if __name__ == "__main__":
    main(sys.argv[1])
