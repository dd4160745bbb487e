// cstSoftmax on the GPU: one work-item per (outer, inner) slice along the axis.
// x and y are float buffers; xoff / yoff are byte offsets of the first element.
// NaN and infinity behave as in the CPU kernel and numpy: max, then exp(x - max) / sum.
__kernel void cst_softmax(__global const float* x, ulong xoff, __global float* y, ulong yoff,
                          ulong outer, ulong axis_len, ulong inner) {
  ulong gid = get_global_id(0);
  if (gid >= outer * inner) return;
  ulong o = gid / inner, i = gid % inner;
  __global const float* xs = x + xoff / 4 + o * axis_len * inner + i;
  __global float* ys = y + yoff / 4 + o * axis_len * inner + i;
  float m = xs[0];
  for (ulong k = 1; k < axis_len; ++k) {
    float v = xs[k * inner];
    m = v > m ? v : m;
  }
  float s = 0.0f;
  for (ulong k = 0; k < axis_len; ++k) {
    float e = exp(xs[k * inner] - m);
    ys[k * inner] = e;
    s += e;
  }
  float r = 1.0f / s;
  for (ulong k = 0; k < axis_len; ++k) ys[k * inner] *= r;
}
