/**
 * One log line per failure window: the first failure after a success (or after the start)
 * is logged, the ones that follow are counted silently until an operation succeeds again.
 */
export type Logger = (line: string) => void;

export const stderrLogger: Logger = (line) => {
  process.stderr.write(`${line}\n`);
};

export class FailureWindow {
  private open = false;
  /** Failures in the current window. */
  failures = 0;
  /** Lines logged so far. */
  logged = 0;

  constructor(
    private readonly log: Logger,
    private readonly what: string,
  ) {}

  get failing(): boolean {
    return this.open;
  }

  fail(reason: string, consequence = 'retrying'): void {
    this.failures++;
    if (this.open) return;
    this.open = true;
    this.logged++;
    try {
      this.log(`mimalloc-pprof: ${this.what} failed: ${reason}; ${consequence} (further failures are not logged until it succeeds again)`);
    } catch {
      // a logger that throws must not break the caller
    }
  }

  ok(): void {
    this.open = false;
    this.failures = 0;
  }
}
