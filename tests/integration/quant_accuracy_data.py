#!/usr/bin/python3
"""quant_accuracy_data.py - real inputs for quant_accuracy.sh (calibration and held-out sets).

usage: /usr/bin/python3 quant_accuracy_data.py OUTDIR [TVDIR MODEL...]

Writes (once; the caller keys OUTDIR by a hash of this file):
  img/calib/NNN.npy  16 x float32 [1, 3, 224, 224]: two crops (one flipped) of each of 8
                     skimage.data photos (astronaut, coffee, rocket, camera -> rgb,
                     hubble_deep_field, immunohistochemistry, coins -> rgb, brick -> rgb)
  img/held/NNN.npy   8 x [1, 3, 224, 224]: one centre crop of 8 OTHER photos (chelsea, retina,
                     stereo_motorcycle left, gravel, moon, clock, cell, colorwheel)
                     Both: resize shorter side to 256 (antialiased bilinear), crop 224,
                     /255, ImageNet mean/std, RGB, NCHW.
  rec/calib, rec/held   text lines rendered by ImageMagick (/usr/bin/convert label:, DejaVu-Sans
                     32 pt, black on white, 6 px white border) -> PaddleOCR rec preprocessing:
                     resize to height 48 keeping aspect (width capped at REC_W), (x/255-0.5)/0.5,
                     pad right with 0 to REC_W: [1, 3, 48, REC_W]. 16 calibration lines, 30
                     held-out lines (different sentences); rec/held.txt = the true strings.
  cls/calib, cls/held   the same lines through PaddleOCR cls preprocessing ([1, 3, 48, 192], width
                     squeezed to 192 when wider); every second line rotated by 180 degrees.
                     cls/held.txt = 0 (upright) / 1 (rotated) per sample.
  det/calib, det/held   white DET_W x DET_H pages with 4-5 lines each (ImageMagick -annotate,
                     DejaVu-Sans 18-26 pt), RGB /255, mean (0.485, 0.456, 0.406) std (0.229,
                     0.224, 0.225): [1, 3, DET_H, DET_W]. 4 calibration pages, 3 held-out pages
                     (held-out pages use held-out sentences).
With TVDIR and MODEL names (e.g. resnet50) it also exports torchvision models that
torchvision_export.py does not write by default, with that script's build() (same seed,
randomised BatchNorm statistics) and export settings, into TVDIR/<model>.onnx.
Files go through a temporary folder that is renamed at the end: an interrupted run leaves
nothing half-written behind.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
REC_W = 640  # rec input width: a multiple of 8, wide enough for ~26 characters at height 48
CLS_W = 192
DET_W, DET_H = 480, 320
CONVERT = '/usr/bin/convert'

CALIB_PHOTOS = ['astronaut', 'coffee', 'rocket', 'camera', 'hubble_deep_field',
                'immunohistochemistry', 'coins', 'brick']
HELD_PHOTOS = ['chelsea', 'retina', 'stereo_motorcycle', 'gravel', 'moon', 'clock', 'cell',
               'colorwheel']

CALIB_LINES = [
    'The quick brown fox jumps.', 'Order 4417 shipped today', 'Call me at 555-0199.',
    'Total due: $86.40', 'Meeting moved to 3:30 PM', 'Hello, world!',
    'Room 12B, second floor', 'Version 2.7.1 released', 'Keep calm and carry on',
    'Invoice #90321', 'Open daily 9 to 5', 'Battery at 73 percent',
    'See page 48 for details', 'Wet paint; do not touch', 'Train leaves at 06:15',
    'Exit only (no entry)',
]
HELD_LINES = [
    'Please close the door.', 'Flight 372 is on time', 'Price: 19.99 EUR', 'Turn left at the bank',
    'Lunch is served at noon', 'Gate 7 closes soon', 'Password reset done',
    'Mix 2 cups of flour', 'The river is very wide', 'Call 911 if needed',
    'Backup finished at 23:58', 'Summer sale: 40% off', 'Bring your own water',
    'Printed on 2024-03-11', 'Silence in the library', 'Box 6 of 12 is empty',
    'Shipping takes 3 days.', 'Press any key to start', 'Only 8 seats left!',
    'Temperature is 21 C', 'Fresh bread every day', 'Read the manual first',
    'Parking level B3', 'We open on Monday', 'Zone 5: staff only',
    'Answer: 42, not 24', 'Turn off the lights', 'Track 9 to Oxford',
    'New tab, same window', 'Lost keys found here',
]


def rgb(img):
    """uint8 HxWx3 from a skimage image (gray -> 3 channels, drop alpha, bool -> 0/255)."""
    img = np.asarray(img)
    if img.dtype == bool:
        img = img.astype(np.uint8) * 255
    if img.dtype != np.uint8:
        img = np.clip(img * (255.0 if img.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return np.ascontiguousarray(img[:, :, :3])


def photo(name):
    from skimage import data
    img = getattr(data, name)()
    if isinstance(img, tuple):  # stereo_motorcycle: (left, right, disparity)
        img = img[0]
    return rgb(img)


def resize(x, h, w):
    """float32 NCHW tensor x resized to (h, w), antialiased bilinear."""
    return torch.nn.functional.interpolate(x, size=(h, w), mode='bilinear', align_corners=False,
                                           antialias=True)


def imagenet(img, crop, flip):
    """Shorter side -> 256, 224 crop at fractional offset crop=(fy, fx), optional flip."""
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float() / 255.0
    h, w = x.shape[2:]
    s = 256.0 / min(h, w)
    nh, nw = max(224, round(h * s)), max(224, round(w * s))
    x = resize(x, nh, nw).clamp(0.0, 1.0)
    oy, ox = round((nh - 224) * crop[0]), round((nw - 224) * crop[1])
    x = x[:, :, oy:oy + 224, ox:ox + 224]
    if flip:
        x = torch.flip(x, dims=[3])
    x = (x - torch.from_numpy(MEAN)[None, :, None, None]) / torch.from_numpy(STD)[None, :, None, None]
    return x.contiguous().numpy().astype(np.float32)


def save(d, i, x):
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, '%03d.npy' % i), np.ascontiguousarray(x, dtype=np.float32))


def render_line(text, tmp):
    """uint8 HxWx3 of TEXT rendered by ImageMagick label: (black on white)."""
    from skimage import io
    out = os.path.join(tmp, 'line.png')
    subprocess.run([CONVERT, '-background', 'white', '-fill', 'black', '-font', 'DejaVu-Sans',
                    '-pointsize', '32', 'label:' + text, '-bordercolor', 'white', '-border', '6',
                    '-type', 'TrueColor', out], check=True)
    return rgb(io.imread(out))


def paddle_rec(img, width):
    """PaddleOCR resize_norm_img: height 48, keep aspect (cap at width), (x/255-0.5)/0.5, pad 0."""
    h, w = img.shape[:2]
    rw = min(width, int(np.ceil(48 * w / h)))
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float() / 255.0
    x = resize(x, 48, rw).clamp(0.0, 1.0)
    x = (x - 0.5) / 0.5
    out = np.zeros((1, 3, 48, width), dtype=np.float32)
    out[:, :, :, :rw] = x.numpy()
    return out


def render_page(lines, tmp, seed):
    from skimage import io
    rng = np.random.default_rng(seed)
    out = os.path.join(tmp, 'page.png')
    cmd = [CONVERT, '-size', '%dx%d' % (DET_W, DET_H), 'xc:white', '-fill', 'black',
           '-font', 'DejaVu-Sans']
    y = 20
    for t in lines:
        pt = int(rng.integers(18, 27))
        y += pt + int(rng.integers(14, 30))
        if y > DET_H - 10:
            break
        cmd += ['-pointsize', str(pt), '-annotate', '+%d+%d' % (int(rng.integers(8, 60)), y), t]
    cmd += ['-type', 'TrueColor', out]
    subprocess.run(cmd, check=True)
    img = rgb(io.imread(out))
    x = img.astype(np.float32).transpose(2, 0, 1)[None] / 255.0
    return ((x - MEAN[None, :, None, None]) / STD[None, :, None, None]).astype(np.float32)


def make_data(out):
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix='.acc-tmp-')
    try:
        crops = [((0.5, 0.5), False), ((0.15, 0.85), True)]
        i = 0
        for name in CALIB_PHOTOS:
            img = photo(name)
            for c, f in crops:
                save(os.path.join(tmp, 'img', 'calib'), i, imagenet(img, c, f))
                i += 1
        for i, name in enumerate(HELD_PHOTOS):
            save(os.path.join(tmp, 'img', 'held'), i, imagenet(photo(name), (0.5, 0.5), False))

        for split, lines in (('calib', CALIB_LINES), ('held', HELD_LINES)):
            labels = []
            for i, t in enumerate(lines):
                img = render_line(t, tmp)
                save(os.path.join(tmp, 'rec', split), i, paddle_rec(img, REC_W))
                rot = i % 2
                labels.append(str(rot))
                save(os.path.join(tmp, 'cls', split), i, paddle_rec(img[::-1, ::-1].copy() if rot else img,
                                                                      CLS_W))
            with open(os.path.join(tmp, 'rec', split + '.txt'), 'w') as f:
                f.write('\n'.join(lines) + '\n')
            with open(os.path.join(tmp, 'cls', split + '.txt'), 'w') as f:
                f.write('\n'.join(labels) + '\n')

        pages = [(CALIB_LINES, 'calib', 4), (HELD_LINES, 'held', 3)]
        for lines, split, n in pages:
            for p in range(n):
                sel = [lines[(p * 5 + k) % len(lines)] for k in range(5)]
                save(os.path.join(tmp, 'det', split), p, render_page(sel, tmp, 100 * p + len(split)))
        for f in ('line.png', 'page.png'):
            if os.path.exists(os.path.join(tmp, f)):
                os.remove(os.path.join(tmp, f))
        if os.path.exists(out):
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def export_extra(tvdir, names):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torchvision_export as tve
    os.makedirs(tvdir, exist_ok=True)
    x = torch.from_numpy(np.zeros((1, 3, 224, 224), dtype=np.float32))
    for name in names:
        f = os.path.join(tvdir, name + '.onnx')
        if os.path.exists(f):
            continue
        model = tve.build(name)
        tmp = f + '.tmp'
        torch.onnx.export(model, x, tmp, opset_version=13, training=torch.onnx.TrainingMode.PRESERVE,
                          do_constant_folding=False, input_names=['input'], output_names=['logits'])
        os.replace(tmp, f)
        print('exported ' + f)


def main():
    if len(sys.argv) < 2 or len(sys.argv) == 3:
        sys.exit(__doc__)
    out = sys.argv[1]
    if not os.path.isdir(out):
        make_data(out)
        print('data: written ' + out)
    else:
        print('data: cached ' + out)
    if len(sys.argv) > 3:
        export_extra(sys.argv[2], sys.argv[3:])


if __name__ == '__main__':
    main()
