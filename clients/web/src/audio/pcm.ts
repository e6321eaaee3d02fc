/**
 * Sample formats of vRT audio (§8.2), shared by the main thread and the worklets:
 * pcm16 (signed 16-bit little-endian), G.711 µ-law (pcmu), and a streaming resampler.
 *
 * µ-law follows ITU-T G.711 on 16-bit samples exactly as `vrt.audio` does (sign and
 * magnitude coded separately, bias 0x84, magnitudes beyond 32635 clipped): 0 encodes
 * to 0xFF and 0xFF decodes to 0.
 */

const BIAS = 0x84;
const CLIP = 32635;

/** One 16-bit sample to its µ-law byte. */
export function muLawEncode(sample: number): number {
  const sign = sample < 0 ? 0x80 : 0;
  const magnitude = Math.min(sample < 0 ? -sample : sample, CLIP) + BIAS;
  const exponent = 31 - Math.clz32(magnitude) - 7; // magnitude + bias is in [2^(e+7), 2^(e+8))
  const mantissa = (magnitude >> (exponent + 3)) & 0x0f;
  return ~(sign | (exponent << 4) | mantissa) & 0xff;
}

/** One µ-law byte to its 16-bit sample. */
export function muLawDecode(code: number): number {
  const c = ~code & 0xff;
  const exponent = (c >> 4) & 0x07;
  const magnitude = ((((c & 0x0f) << 3) + BIAS) << exponent) - BIAS;
  return c & 0x80 ? -magnitude : magnitude;
}

const DECODE = Int16Array.from({ length: 256 }, (_, code) => muLawDecode(code));

/** A float sample in [-1, 1] to a 16-bit integer, rounded and clipped. */
export function toInt16(x: number): number {
  const s = Math.round(x * 32767);
  return s > 32767 ? 32767 : s < -32768 ? -32768 : s;
}

/** Float samples to pcm16 bytes (little-endian). */
export function floatToPcm16(samples: Float32Array): Uint8Array {
  const out = new Uint8Array(samples.length * 2);
  const view = new DataView(out.buffer);
  for (let i = 0; i < samples.length; i++) view.setInt16(i * 2, toInt16(samples[i]!), true);
  return out;
}

/** Float samples to µ-law bytes. */
export function floatToPcmu(samples: Float32Array): Uint8Array {
  const out = new Uint8Array(samples.length);
  for (let i = 0; i < samples.length; i++) out[i] = muLawEncode(toInt16(samples[i]!));
  return out;
}

/** pcm16 bytes to float samples; a trailing odd byte is ignored. */
export function pcm16ToFloat(bytes: Uint8Array): Float32Array {
  const count = bytes.length >> 1;
  const out = new Float32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, count * 2);
  for (let i = 0; i < count; i++) out[i] = view.getInt16(i * 2, true) / 32768;
  return out;
}

/** µ-law bytes to float samples. */
export function pcmuToFloat(bytes: Uint8Array): Float32Array {
  const out = new Float32Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) out[i] = DECODE[bytes[i]!]! / 32768;
  return out;
}

/**
 * A streaming band-limited resampler: windowed-sinc interpolation (Blackman window,
 * `halfWidth` taps each side), low-pass at 0.9 of the lower Nyquist frequency so that
 * 48 kHz -> 24 kHz or 8 kHz does not alias. Feed blocks of any length; each call
 * returns the output samples they complete. Delay: `halfWidth` input samples.
 */
export class Resampler {
  readonly ratio: number;
  private readonly cutoff: number;
  private history: Float32Array;
  private readonly table: Array<Float32Array | undefined> = [];
  /** Position of the next output sample, in input samples from history[0]. */
  private position: number;

  constructor(
    readonly fromRate: number,
    readonly toRate: number,
    private readonly halfWidth = 16,
  ) {
    this.ratio = fromRate / toRate;
    this.cutoff = Math.min(1, toRate / fromRate) * 0.9;
    this.history = new Float32Array(2 * halfWidth);
    this.position = halfWidth;
  }

  process(input: Float32Array): Float32Array {
    if (this.fromRate === this.toRate) return input.slice();
    const hw = this.halfWidth;
    const buffer = new Float32Array(this.history.length + input.length);
    buffer.set(this.history);
    buffer.set(input, this.history.length);
    const out: number[] = [];
    while (this.position + hw < buffer.length) {
      const center = Math.floor(this.position);
      const taps = this.taps(Math.round((this.position - center) * PHASES));
      let sum = 0;
      for (let k = 0; k < taps.length; k++) sum += buffer[center - hw + 1 + k]! * taps[k]!;
      out.push(sum);
      this.position += this.ratio;
    }
    const keep = 2 * hw;
    const drop = buffer.length - keep;
    this.history = buffer.slice(drop);
    this.position -= drop;
    return Float32Array.from(out);
  }

  /** The kernel for an output point `phase / PHASES` of a sample past an input sample. */
  private taps(phase: number): Float32Array {
    let taps = this.table[phase];
    if (taps === undefined) {
      const hw = this.halfWidth;
      const frac = phase / PHASES;
      taps = new Float32Array(2 * hw);
      for (let k = -hw + 1; k <= hw; k++) {
        const x = k - frac; // distance from the output point, in input samples
        const w = 0.42 + 0.5 * Math.cos((Math.PI * x) / hw) + 0.08 * Math.cos((2 * Math.PI * x) / hw);
        const t = Math.PI * x * this.cutoff;
        taps[k + hw - 1] = this.cutoff * (t === 0 ? 1 : Math.sin(t) / t) * w;
      }
      this.table[phase] = taps;
    }
    return taps;
  }
}

/** Kernel phases per input sample: the output point is rounded to 1/256 of a sample. */
const PHASES = 256;
