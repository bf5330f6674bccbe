#!/usr/bin/python3
"""rec_lines.py - more PaddleOCR rec inputs for bench/calib_cv.sh (no numpy needed).

usage: python3 bench/rec_lines.py OUT [CONVERT]

Renders 160 random text lines (2-5 words, numbers and punctuation from a fixed vocabulary, seed 7)
the way tests/integration/quant_accuracy_data.py renders its lines (ImageMagick label:,
DejaVu-Sans 32 pt, black on white, 6 px border), resizes them to height 48 with ImageMagick
(-resize x48) and writes PaddleOCR rec inputs float32 [1, 3, 48, 640] ((x/255 - 0.5)/0.5, padded
right with 0) as .npy: OUT/pool/000..059.npy (calibration pool) and OUT/eval/060..159.npy (the
judged lines); OUT/lines.txt holds the strings. CONVERT: the ImageMagick binary (default
/usr/local/bin/convert, else convert on PATH).
"""
import os
import random
import shutil
import struct
import subprocess
import sys

W = 640
WORDS = ('the of and to in is you that it he was for on are as with his they at be this have from or '
         'one had by word but not what all were we when your can said there use an each which she do '
         'how their if will up other about out many then them these so some her would make like him '
         'into time has look two more write go see number no way could people my than first water '
         'been call who oil its now find long down day did get come made may part Order Invoice Room '
         'Total Train Battery Version Meeting Exit Open Call Hello Keep Wet See').split()


def line(rnd):
    ws = []
    for _ in range(rnd.randint(2, 5)):
        r = rnd.random()
        if r < 0.2:
            ws.append(str(rnd.randint(0, 99999)))
        elif r < 0.3:
            ws.append('%d.%02d' % (rnd.randint(0, 999), rnd.randint(0, 99)))
        else:
            ws.append(rnd.choice(WORDS))
    s = ' '.join(ws)
    if rnd.random() < 0.3:
        s = s[0].upper() + s[1:]
    return s + rnd.choice(['', '.', '!', ':', ';', '?'])


def write_npy(path, vals):
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 48, %d), }" % W
    hdr += ' ' * (127 - 10 - len(hdr)) + '\n'
    with open(path, 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(hdr)) + hdr.encode())
        f.write(struct.pack('<%df' % len(vals), *vals))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    out = sys.argv[1]
    conv = sys.argv[2] if len(sys.argv) == 3 else (
        '/usr/local/bin/convert' if os.path.exists('/usr/local/bin/convert') else shutil.which('convert'))
    rnd = random.Random(7)
    for d in ('pool', 'eval'):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    text = []
    for i in range(160):
        s = line(rnd)
        text.append(s)
        rgb = subprocess.run([conv, '-background', 'white', '-fill', 'black', '-font', 'DejaVu-Sans',
                              '-pointsize', '32', 'label:' + s, '-bordercolor', 'white', '-border', '6',
                              '-resize', 'x48', '-depth', '8', 'rgb:-'],
                             capture_output=True, check=True).stdout
        w = len(rgb) // (48 * 3)
        vals = [0.0] * (3 * 48 * W)
        for y in range(48):
            for x in range(min(w, W)):
                o = (y * w + x) * 3
                for c in range(3):
                    vals[(c * 48 + y) * W + x] = (rgb[o + c] / 255.0 - 0.5) / 0.5
        write_npy(os.path.join(out, 'pool' if i < 60 else 'eval', '%03d.npy' % i), vals)
    with open(os.path.join(out, 'lines.txt'), 'w') as f:
        f.write('\n'.join(text) + '\n')


if __name__ == '__main__':
    main()
