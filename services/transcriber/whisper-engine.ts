import type { Logger } from "../../shared/logger";
import { AppError } from "../../shared/errors";
import type { TranscriptionEngine } from "../../shared/workers/types";

export interface WhisperOptions {
  modelPath: string;
  realTimeFactor?: number;
  logger?: Logger;
}

export async function createWhisperEngine(_options: WhisperOptions): Promise<TranscriptionEngine> {
  throw new AppError("unavailable", "whisper_unavailable", "whisper.cpp binding not installed");
}
