/** The part of autocannon's programmatic API the tests use (the package ships no types). */
declare module 'autocannon' {
  interface Options {
    url: string;
    connections?: number;
    overallRate?: number;
    duration?: number;
  }
  interface Result {
    '2xx': number;
    /** seconds */
    duration: number;
    errors: number;
  }
  function autocannon(options: Options): Promise<Result>;
  export default autocannon;
}
