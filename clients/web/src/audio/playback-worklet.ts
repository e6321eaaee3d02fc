/**
 * The speaker's AudioWorklet: a jitter buffer in front of the audio clock.
 *
 * Chunks arrive with their item id and rate; they are resampled to the context's rate
 * and queued. Playback starts once `jitterMs` of audio is queued, or `jitterMs` after
 * the first chunk arrived (so that a short item still plays), and goes back to
 * buffering on an underrun. Every sample written to the output is counted against its
 * item: that count, not what was received, is what `stop` reports as played (§8.4).
 * A `stop` empties the queue before the next render quantum (128 samples).
 */
/// <reference path="./worklet-scope.d.ts" />
import { Resampler } from "./pcm.js";

interface Chunk {
  itemId: string;
  samples: Float32Array;
  offset: number;
}

interface ItemCount {
  rendered: number;
  started: boolean;
}

class Playback extends AudioWorkletProcessor {
  private readonly queue: Chunk[] = [];
  private queued = 0;
  private buffering = true;
  private waitingSince: number | null = null;
  private readonly items = new Map<string, ItemCount>();
  private readonly resamplers = new Map<number, Resampler>();
  private readonly jitter: number;
  private closed = false;

  constructor(init: { processorOptions?: unknown }) {
    super(init);
    const options = (init.processorOptions ?? {}) as { jitterMs?: number };
    this.jitter = Math.round(((options.jitterMs ?? 60) * sampleRate) / 1000);
    this.port.onmessage = (event: MessageEvent) => this.message(event.data as Record<string, unknown>);
  }

  private message(message: Record<string, unknown>): void {
    if (message["type"] === "close") {
      this.closed = true;
    } else if (message["type"] === "push") {
      const itemId = message["itemId"] as string;
      const rate = message["rate"] as number;
      let resampler = this.resamplers.get(rate);
      if (resampler === undefined) this.resamplers.set(rate, (resampler = new Resampler(rate, sampleRate)));
      const samples = resampler.process(message["samples"] as Float32Array);
      if (!this.items.has(itemId)) {
        this.items.set(itemId, { rendered: 0, started: false });
        while (this.items.size > 64) this.items.delete(this.items.keys().next().value!);
      }
      if (samples.length === 0) return;
      this.queue.push({ itemId, samples, offset: 0 });
      this.queued += samples.length;
      if (this.buffering) this.waitingSince ??= currentFrame;
    } else if (message["type"] === "stop" || message["type"] === "report") {
      const played = [...this.items].map(([itemId, count]) => ({ itemId, playedMs: (count.rendered * 1000) / sampleRate }));
      if (message["type"] === "stop") {
        this.queue.length = 0;
        this.queued = 0;
        this.items.clear();
        this.buffering = true;
        this.waitingSince = null;
      }
      this.port.postMessage({ type: message["type"], id: message["id"], played, time: currentTime });
    }
  }

  process(_inputs: Float32Array[][], outputs: Float32Array[][]): boolean {
    if (this.closed) return false; // the node may be collected
    const channels = outputs[0];
    const out = channels?.[0];
    if (channels === undefined || out === undefined) return true;
    if (this.buffering && this.queued > 0) {
      const waited = this.waitingSince === null ? 0 : currentFrame - this.waitingSince;
      if (this.queued >= this.jitter || waited >= this.jitter) {
        this.buffering = false;
        this.waitingSince = null;
      }
    }
    let i = 0;
    while (!this.buffering && i < out.length) {
      const chunk = this.queue[0];
      if (chunk === undefined) {
        this.buffering = true; // underrun: wait for the buffer to fill again
        this.waitingSince = null;
        break;
      }
      const count = this.items.get(chunk.itemId)!;
      if (!count.started) {
        count.started = true;
        this.port.postMessage({ type: "started", itemId: chunk.itemId, time: currentTime + i / sampleRate });
      }
      const n = Math.min(out.length - i, chunk.samples.length - chunk.offset);
      out.set(chunk.samples.subarray(chunk.offset, chunk.offset + n), i);
      chunk.offset += n;
      count.rendered += n;
      this.queued -= n;
      i += n;
      if (chunk.offset === chunk.samples.length) this.queue.shift();
    }
    for (let c = 1; c < channels.length; c++) channels[c]!.set(out);
    return true;
  }
}

registerProcessor("vrt-playback", Playback);
