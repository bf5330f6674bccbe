#!/usr/bin/python3
"""quant_accuracy_eval.py - the measurements of quant_accuracy.sh (numpy and python3-onnx only).

Output folders hold one sub-folder per sample, NNN/<output>.npy (`onnxq run --output-dir`
and quant_accuracy_ort.js both write this). Every command prints its numbers on the first
line (space separated; 'inf' when two outputs are identical, 'nan' when not measurable) and
details on further lines indented by 4 spaces. Exit 0 unless the arguments or files are
unusable (exit 2).

  diff REF TEST        max over samples and outputs of max|ref - test| / max|ref| (normalised
                       max difference); shapes must match, a missing file counts as inf.
  sqnr REF TEST        per output and sample SQNR = 10 log10(sum ref^2 / sum (ref - test)^2) in dB;
                       prints the minimum over samples and the mean over samples of the worst
                       output (the output with the lowest minimum).
  compare JSON         reads `onnxq compare --json` output and prints the lowest sqnr_min_db and
                       the matching sqnr_mean_db over its outputs (keys found anywhere in the JSON).
  argmax REF TEST      fraction of samples whose argmax over the last axis (all positions) agrees.
  cer DICT TRUTH DIR   PaddleOCR CTC greedy decoding of every sample (argmax per step, collapse
                       repeats, drop blank 0, class i -> DICT line i-1, last class = ' ', strip the
                       ends: the white border can read as a space), then the character error rate sum(Levenshtein(decoded, truth)) / sum(len(truth)).
  iou REF TEST THR     text masks prob > THR of the two outputs: intersection / union per sample;
                       prints the minimum and mean over samples.
  size QMODEL          weight bytes of a quantized model: for every DequantizeLinear whose input 0
       [FMODEL]        is an initializer, the stored bytes of that input + scale + zero point
                       (int4/uint4 counted 2 per byte, as ONNX packs them) vs 4 bytes per element
                       (float32); prints ratio, quantized bytes, float bytes, number of weights.
                       With FMODEL, also checks that each such weight's element count matches a
                       float initializer of the float model (printed as matched/total).
  worst REF TEST       the sample folder whose normalised max difference (as diff) is largest.
  qprobe QMODEL OUT    writes OUT: QMODEL with the input and the output of every QuantizeLinear
                       added as graph outputs (types from value_info, else from the scale and the
                       zero point; float8e4m3fn outputs are left out, as onnxruntime-node cannot
                       return them: `ties` recomputes them), for `ties`; external data stays where
                       QMODEL's refers (write OUT next to QMODEL). Prints the number of
                       QuantizeLinear nodes probed.
  ties QMODEL SAMPLE ORT OQ
                       rounding-tie analysis of two runs of the probe model on one sample (ORT/000
                       and OQ/000, or ORT and OQ themselves when they hold no 000; SAMPLE is that
                       sample's .npy, for a Q reading a graph input).
                       Walks the QuantizeLinear nodes in topological order. A divergence is a Q whose
                       integer output differs while the outputs of all Qs upstream of it are equal
                       (the first divergence of each path; the first of them in graph order is the
                       one named). Every divergence must be a rounding tie: each differing element
                       differs by exactly 1 step, and ORT's float input v = x / scale there lies
                       within 1e-3 of k + 0.5 (scale from the initializer or Constant; per-axis and
                       blocked scales per element). A float8e4m3fn Q's output is the E4M3FN
                       rounding (nearest, ties to even, saturated at +-448) of each run's v, the
                       step one code, and the distance from the midpoint between two codes is
                       measured in units of their spacing. First line 'ok MESSAGE' or 'fail MESSAGE'.
"""
import json
import math
import os
import sys

import numpy as np


def die(msg):
    print('quant_accuracy_eval: ' + msg, file=sys.stderr)
    sys.exit(2)


def samples(d):
    if not os.path.isdir(d):
        die(d + ': not a folder')
    s = sorted(x for x in os.listdir(d) if os.path.isdir(os.path.join(d, x)))
    if not s:
        die(d + ': no sample folders')
    return s


def outputs(d, s):
    return sorted(f for f in os.listdir(os.path.join(d, s)) if f.endswith('.npy'))


def pairs(ref, test):
    """Yields (sample, output, ref array, test array or None)."""
    for s in samples(ref):
        for o in outputs(ref, s):
            a = np.load(os.path.join(ref, s, o)).astype(np.float64)
            p = os.path.join(test, s, o)
            b = np.load(p).astype(np.float64) if os.path.exists(p) else None
            if b is not None and b.shape != a.shape:
                print('    %s/%s: shape %s vs %s' % (s, o, a.shape, b.shape), file=sys.stderr)
                b = None
            yield s, o, a, b


def fmt(x):
    return 'inf' if x == math.inf else 'nan' if x != x else '%.6g' % x


def cmd_diff(ref, test):
    worst = 0.0
    per = {}
    for _, o, a, b in pairs(ref, test):
        if b is None:
            d = math.inf
        else:
            d = float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(a))), 1e-12)
            if np.isnan(d):
                d = math.inf
        per[o] = max(per.get(o, 0.0), d)
        worst = max(worst, d)
    print(fmt(worst))
    for o, d in per.items():
        print('    %s: max normalised diff %s' % (o, fmt(d)))


def sqnr(a, b):
    noise = float(np.sum((a - b) ** 2))
    sig = float(np.sum(a ** 2))
    if not np.isfinite(noise):
        return -math.inf
    return math.inf if noise == 0 else 10.0 * math.log10(max(sig, 1e-300) / noise)


def cmd_sqnr(ref, test):
    per = {}
    for _, o, a, b in pairs(ref, test):
        per.setdefault(o, []).append(-math.inf if b is None else sqnr(a, b))
    worst = None
    for o, v in per.items():
        mn = min(v)
        fin = [x for x in v if x != math.inf]
        mean = math.inf if not fin else sum(fin) / len(fin)
        if worst is None or mn < worst[0]:
            worst = (mn, mean)
    print('%s %s' % (fmt(worst[0]), fmt(worst[1])))
    for o, v in per.items():
        print('    %s: SQNR per sample %s' % (o, ' '.join('%.1f' % x for x in v)))


def cmd_compare(path):
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        die('%s: %s' % (path, e))
    found = []

    def walk(x, name):
        if isinstance(x, dict):
            if 'sqnr_min_db' in x:
                found.append((x.get('name', name), x['sqnr_min_db'], x.get('sqnr_mean_db')))
            for k, v in x.items():
                walk(v, k if isinstance(v, dict) else name)
        elif isinstance(x, list):
            for v in x:
                walk(v, name)

    walk(j, '?')
    if not found:
        die(path + ': no sqnr_min_db in the JSON')

    def num(v):  # JSON has no inf: null or a string stand for an exact match
        if v is None or isinstance(v, str):
            return math.inf if v in (None, 'inf', 'Infinity') else float(v)
        return float(v)

    found = [(n, num(a), num(b)) for n, a, b in found]
    w = min(found, key=lambda t: t[1])
    print('%s %s' % (fmt(w[1]), fmt(w[2])))
    for n, a, b in found:
        print('    %s: onnxq compare SQNR min %s mean %s dB' % (n, fmt(a), fmt(b)))


def cmd_argmax(ref, test):
    n = same = 0
    lines = []
    for s, o, a, b in pairs(ref, test):
        n += 1
        if b is not None and np.array_equal(np.argmax(a, axis=-1), np.argmax(b, axis=-1)):
            same += 1
        else:
            lines.append('    %s/%s: argmax differs' % (s, o))
    print(fmt(same / n if n else math.nan))  # the number first: the shell reads line 1
    if lines:
        print('\n'.join(lines))


def levenshtein(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def cmd_cer(dict_path, truth_path, d):
    with open(dict_path, encoding='utf-8') as f:
        chars = [line.rstrip('\n') for line in f]
    with open(truth_path, encoding='utf-8') as f:
        truth = [line.rstrip('\n') for line in f if line.strip()]
    ss = samples(d)
    if len(ss) != len(truth):
        die('%s: %d samples but %d truth lines' % (d, len(ss), len(truth)))
    errs = total = 0
    lines = []
    for s, t in zip(ss, truth):
        outs = outputs(d, s)
        if len(outs) != 1:
            die('%s/%s: want one output' % (d, s))
        p = np.load(os.path.join(d, s, outs[0]))
        if p.ndim != 3 or p.shape[0] != 1 or p.shape[2] != len(chars) + 2:
            die('%s/%s: shape %s, want [1, T, %d]' % (d, s, p.shape, len(chars) + 2))
        idx = np.argmax(p[0], axis=-1)
        out, last = [], 0
        for k in idx:
            k = int(k)
            if k != last and k != 0:
                out.append(' ' if k == len(chars) + 1 else chars[k - 1])
            last = k
        got = ''.join(out).strip()  # the white border reads as a space at either end
        e = levenshtein(got, t)
        errs += e
        total += len(t)
        if e:
            lines.append('    %s: read %r, truth %r (%d edits)' % (s, got, t, e))
    print(fmt(errs / total))
    print('\n'.join(lines) if lines else '    all %d lines read exactly' % len(ss))


def cmd_iou(ref, test, thr):
    v, lines = [], []
    for s, o, a, b in pairs(ref, test):
        ma = a > thr
        if b is None:
            v.append(0.0)
            continue
        mb = b > thr
        u = int(np.sum(ma | mb))
        v.append(1.0 if u == 0 else int(np.sum(ma & mb)) / u)
        lines.append('    %s/%s: IoU %.4f (%d text pixels in the reference)' % (s, o, v[-1], int(np.sum(ma))))
    print('%s %s' % (fmt(min(v)), fmt(sum(v) / len(v))))
    print('\n'.join(lines))


ONNX_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 10: 16, 11: 64, 16: 16, 17: 8, 18: 8,
             19: 8, 20: 8, 21: 4, 22: 4}


def cmd_size(qpath, fpath):
    import onnx
    q = onnx.load(qpath, load_external_data=False)
    inits = {t.name: t for t in q.graph.initializer}

    def nbytes(t):
        n = int(np.prod(t.dims)) if len(t.dims) else 1
        bits = ONNX_BITS.get(t.data_type)
        if bits is None:
            die('%s: initializer %s has data type %d' % (qpath, t.name, t.data_type))
        return (n * bits + 7) // 8, n

    qb = fb = nw = 0
    numels = []
    for node in q.graph.node:
        if node.op_type != 'DequantizeLinear' or node.input[0] not in inits:
            continue
        b, n = nbytes(inits[node.input[0]])
        if n < 16:  # a quantized bias or constant, not a weight matrix
            continue
        for extra in node.input[1:]:
            if extra in inits:
                b += nbytes(inits[extra])[0]
        qb += b
        fb += 4 * n
        nw += 1
        numels.append(n)
    print('%s %d %d %d' % (fmt(qb / fb if fb else math.nan), qb, fb, nw))
    if fpath:
        f = onnx.load(fpath, load_external_data=False)
        fsizes = {}
        for t in f.graph.initializer:
            if t.data_type == 1:
                n = int(np.prod(t.dims)) if len(t.dims) else 1
                fsizes[n] = fsizes.get(n, 0) + 1
        matched = 0
        for n in numels:
            if fsizes.get(n, 0) > 0:
                fsizes[n] -= 1
                matched += 1
        print('    %d of %d dequantized weights match a float32 initializer of the float model by size'
              % (matched, len(numels)))


def cmd_worst(ref, test):
    per = {}
    for s, _, a, b in pairs(ref, test):
        d = math.inf if b is None else float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(a))), 1e-12)
        per[s] = max(per.get(s, 0.0), math.inf if d != d else d)
    print(max(per, key=lambda k: per[k]))


def npy_name(value):
    return value.replace('/', '_') + '.npy'


def q_out_type(g, node, inits):
    """ONNX element type of a QuantizeLinear output: zero point's type, else output_dtype, else uint8."""
    if len(node.input) > 2 and node.input[2] in inits:
        return inits[node.input[2]].data_type
    for a in node.attribute:
        if a.name == 'output_dtype' and a.i:
            return a.i
    return 2


def cmd_qprobe(qpath, out):
    import onnx
    from onnx import helper
    m = onnx.load(qpath, load_external_data=False)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    known = {v.name: v for v in list(g.value_info) + list(g.input) + list(g.output)}
    have = {o.name for o in g.output}
    gin = {i.name for i in g.input}
    n = 0
    for node in g.node:
        if node.op_type != 'QuantizeLinear' or node.domain not in ('', 'ai.onnx'):
            continue
        n += 1
        x, y = node.input[0], node.output[0]
        for name, elem in ((x, inits[node.input[1]].data_type if node.input[1] in inits else 1),
                           (y, q_out_type(g, node, inits))):
            if name in have or name in inits or name in gin or elem == FP8:
                continue
            if name in known:
                vi = onnx.ValueInfoProto()
                vi.CopyFrom(known[name])
            else:
                vi = helper.make_tensor_value_info(name, elem, None)
            g.output.append(vi)
            have.add(name)
    onnx.save(m, out)
    print(n)


FP8 = 17  # TensorProto.FLOAT8E4M3FN


def fp8_grid():
    """The finite float8e4m3fn magnitudes in code order (code = 8 e + m; 0x7f is NaN)."""
    return np.array([(m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
                     for e in range(16) for m in range(8)][:127])


def fp8_codes(v):
    """Signed E4M3FN code indices of v (float64): nearest, ties to even, saturated."""
    g = fp8_grid()
    a = np.minimum(np.abs(v), g[-1])
    hi = np.clip(np.searchsorted(g, a), 1, len(g) - 1)
    lo = hi - 1
    dl, dh = a - g[lo], g[hi] - a
    k = np.where(dl < dh, lo, np.where(dh < dl, hi, np.where(lo % 2 == 0, lo, hi)))
    return np.where(v < 0, -k, k).astype(np.int64)


def fp8_tie(v):
    """Distance of |v| from the midpoint of its two neighbouring E4M3FN values, in their spacing."""
    g = fp8_grid()
    a = np.minimum(np.abs(v), g[-1])
    hi = np.clip(np.searchsorted(g, a), 1, len(g) - 1)
    lo = hi - 1
    return np.abs(a - (g[lo] + g[hi]) / 2) / (g[hi] - g[lo])


def const_tensors(g):
    """Initializers and Constant node values by name, as numpy arrays (loaded lazily)."""
    from onnx import numpy_helper
    c = {t.name: t for t in g.initializer}
    for node in g.node:
        if node.op_type == 'Constant':
            for a in node.attribute:
                if a.name == 'value':
                    c[node.output[0]] = a.t
    return c, numpy_helper.to_array


def topo(nodes):
    """Node indices in a topological order (stable: file order among ready nodes)."""
    prod = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                prod[o] = i
    deps = [{prod[x] for x in n.input if x in prod and prod[x] != i} for i, n in enumerate(nodes)]
    users = [[] for _ in nodes]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    left = [len(d) for d in deps]
    import heapq
    ready = [i for i, k in enumerate(left) if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            left[u] -= 1
            if left[u] == 0:
                heapq.heappush(ready, u)
    return order, deps


def per_element_scale(scale, xshape, node):
    scale = np.asarray(scale, dtype=np.float32)
    if scale.size == 1:
        return scale.reshape(())
    axis, block = 1, 0
    for a in node.attribute:
        if a.name == 'axis':
            axis = a.i
        elif a.name == 'block_size':
            block = a.i
    axis %= len(xshape)
    if block:
        return np.repeat(scale, block, axis=axis)[tuple(slice(0, d) for d in xshape)]
    sh = [1] * len(xshape)
    sh[axis] = scale.size
    return scale.reshape(sh)


def cmd_ties(qpath, sample, ortdir, oqdir):
    import onnx
    g = onnx.load(qpath, load_external_data=False).graph
    consts, to_array = const_tensors(g)
    gin = {i.name for i in g.input if i.name not in consts}
    nodes = list(g.node)
    order, deps = topo(nodes)
    inits = {t.name: t for t in g.initializer}
    sub_o = os.path.join(ortdir, '000')
    sub_q = os.path.join(oqdir, '000')
    if not os.path.isdir(sub_o) and not os.path.isdir(sub_q):
        sub_o, sub_q = ortdir, oqdir

    def load(d, name):
        if name in gin:
            return np.load(sample)
        p = os.path.join(d, npy_name(name))
        if not os.path.exists(p):
            die('%s: missing (run the probe model of qprobe)' % p)
        return np.load(p)

    anc = [set() for _ in nodes]  # indices of the QuantizeLinear nodes upstream of each node
    diverged = set()
    nq = same = 0
    found = []  # (name, ndiff, nelem, max step, worst tie distance, float input diff in steps)
    for i in order:
        for j in deps[i]:
            anc[i] |= anc[j]
            if nodes[j].op_type == 'QuantizeLinear':
                anc[i].add(j)
        n = nodes[i]
        if n.op_type != 'QuantizeLinear' or n.input[0] in consts:
            continue
        nq += 1
        fp8 = q_out_type(g, n, inits) == FP8
        if fp8 and n.input[1] not in consts:
            die("Q '%s': float8e4m3fn with a scale that is not a constant" % n.name)
        if fp8:  # the codes from each run's input (ORT cannot return float8 tensors)
            x8 = [load(d, n.input[0]).astype(np.float32) for d in (sub_o, sub_q)]
            s8 = np.broadcast_to(per_element_scale(to_array(consts[n.input[1]]), x8[0].shape, n),
                                 x8[0].shape)
            a, b = (fp8_codes((x / s8).astype(np.float64)) for x in x8)
        else:
            a = load(sub_o, n.output[0]).astype(np.int64)
            b = load(sub_q, n.output[0]).astype(np.int64)
        if a.shape != b.shape:
            die("Q '%s': output shape %s (ORT) vs %s (onnxq)" % (n.name, a.shape, b.shape))
        diff = a != b
        if not diff.any():
            same += 1
            continue
        diverged.add(i)
        if anc[i] & diverged:
            continue  # follows an earlier divergence on its path
        if n.input[1] not in consts:
            found.append((n.name, int(diff.sum()), a.size, None, math.inf, math.nan))
            continue
        x = load(sub_o, n.input[0]).astype(np.float32)
        xq = load(sub_q, n.input[0]).astype(np.float32)
        s = np.broadcast_to(per_element_scale(to_array(consts[n.input[1]]), x.shape, n), x.shape)
        v = (x / s)[diff].astype(np.float64)  # float32 division, as both runtimes do
        tie = fp8_tie(v) if fp8 else np.abs(v - (np.floor(v) + 0.5))
        step = int(np.max(np.abs(a - b)))
        fd = float(np.max(np.abs(x.astype(np.float64) - xq) / s)) if x.shape == xq.shape else math.inf
        found.append((n.name, int(diff.sum()), a.size, step, float(np.max(tie)), fd))
    if not found:
        print('fail none of the %d QuantizeLinear outputs differs: the output difference is not a rounding tie' % nq)
        return
    bad = [f for f in found if f[3] != 1 or not f[4] <= 1e-3]
    f = bad[0] if bad else found[0]
    more = '' if len(found) == 1 else '; %d more independent divergences%s' % (
        len(found) - 1, '' if bad else ', all ties')
    if not bad:
        print("ok first divergence is a rounding tie (Q '%s': %d of %d elements, 1 step%s)" % (f[0], f[1], f[2], more))
    elif f[3] is None:
        print("fail divergence at Q '%s' (%d of %d elements) whose scale is not a constant" % f[:3])
    else:
        print("fail divergence at Q '%s' is not a rounding tie: %d of %d elements, max %d step(s), "
              "worst distance from a tie %.3g (want 1 step, <= 1e-3)%s" % (f[0], f[1], f[2], f[3], f[4], more))
    for name, nd, ne, step, dist, fd in found:
        print("    divergence at Q '%s': %d of %d elements, max %s step(s), worst distance from a tie %.3g, "
              "float inputs differ by <= %.3g steps" % (name, nd, ne, step, dist, fd))
    print('    %d QuantizeLinear nodes: %d equal, %d diverge first on their path, %d follow'
          % (nq, same, len(found), len(diverged) - len(found)))

def main():
    a = sys.argv[1:]
    if not a:
        sys.exit(__doc__)
    cmd, args = a[0], a[1:]
    if cmd == 'diff' and len(args) == 2:
        cmd_diff(*args)
    elif cmd == 'sqnr' and len(args) == 2:
        cmd_sqnr(*args)
    elif cmd == 'compare' and len(args) == 1:
        cmd_compare(*args)
    elif cmd == 'argmax' and len(args) == 2:
        cmd_argmax(*args)
    elif cmd == 'cer' and len(args) == 3:
        cmd_cer(*args)
    elif cmd == 'iou' and len(args) == 3:
        cmd_iou(args[0], args[1], float(args[2]))
    elif cmd == 'size' and len(args) in (1, 2):
        cmd_size(args[0], args[1] if len(args) == 2 else None)
    elif cmd == 'worst' and len(args) == 2:
        cmd_worst(*args)
    elif cmd == 'qprobe' and len(args) == 2:
        cmd_qprobe(*args)
    elif cmd == 'ties' and len(args) == 4:
        cmd_ties(*args)
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main()
