/**
 * The microphone's AudioWorklet: mono input at the context's rate, resampled to the
 * session's input rate and cut into 20 ms frames, each encoded (pcm16 or pcmu, or left
 * as float for the Opus encoder on the main thread) and posted with the context time
 * at which its last sample was captured.
 */
/// <reference path="./worklet-scope.d.ts" />
import { floatToPcm16, floatToPcmu, Resampler } from "./pcm.js";

export interface CaptureOptions {
  rate: number;
  encoding: "pcm16" | "pcmu" | "float";
  frameMs: number;
}

class Capture extends AudioWorkletProcessor {
  private readonly options: CaptureOptions;
  private readonly resampler: Resampler;
  private frame: Float32Array;
  private filled = 0;
  private muted = false;
  private tail = 0;
  private stopped = false;

  constructor(init: { processorOptions?: unknown }) {
    super(init);
    this.options = init.processorOptions as CaptureOptions;
    this.resampler = new Resampler(sampleRate, this.options.rate);
    this.frame = new Float32Array(Math.round((this.options.rate * this.options.frameMs) / 1000));
    this.port.onmessage = (event: MessageEvent) => {
      const message = event.data as { type: string; tailMs?: number };
      if (message.type === "mute") {
        // Push-to-talk released: trail silence so that the server's voice activity
        // detection hears the speech end, then send nothing.
        this.muted = true;
        this.tail = Math.round(((message.tailMs ?? 0) * sampleRate) / 1000);
      } else if (message.type === "unmute") {
        this.muted = false;
      } else if (message.type === "stop") {
        this.stopped = true;
      }
    };
  }

  process(inputs: Float32Array[][]): boolean {
    if (this.stopped) return false;
    const channels = inputs[0];
    const first = channels?.[0];
    if (channels === undefined || first === undefined) return true;
    let block: Float32Array;
    if (this.muted) {
      if (this.tail <= 0) return true;
      block = new Float32Array(first.length);
      this.tail -= first.length;
    } else if (channels.length === 1) {
      block = first;
    } else {
      block = new Float32Array(first.length);
      for (const channel of channels) for (let i = 0; i < block.length; i++) block[i]! += channel[i]! / channels.length;
    }
    const samples = this.resampler.process(block);
    const end = currentTime + first.length / sampleRate;
    for (let i = 0; i < samples.length; i++) {
      this.frame[this.filled++] = samples[i]!;
      if (this.filled === this.frame.length) {
        this.post((end * sampleRate - (samples.length - 1 - i) * this.resampler.ratio) / sampleRate);
        this.filled = 0;
      }
    }
    return true;
  }

  private post(time: number): void {
    const frame = this.frame;
    let energy = 0;
    for (let i = 0; i < frame.length; i++) energy += frame[i]! * frame[i]!;
    const level = Math.sqrt(energy / frame.length);
    const encoding = this.options.encoding;
    const data = encoding === "pcm16" ? floatToPcm16(frame) : encoding === "pcmu" ? floatToPcmu(frame) : frame.slice();
    this.port.postMessage({ type: "frame", data, time, level }, [data.buffer]);
  }
}

registerProcessor("vrt-capture", Capture);
