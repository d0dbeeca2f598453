// A uPlot chart (MIT: a small canvas chart made for time series) in a Preact component: loaded
// when first drawn, as wide as its element, redrawn when `deps` change, resized with the window.
import { useEffect } from 'preact/hooks';

/** Draws `build()`'s { options, data } into `element` (nothing while `build` is undefined). */
export function usePlot(element, height, build, deps) {
  useEffect(() => {
    if (!build || !element.current) return undefined;
    let plot;
    let over = false;
    const size = () => ({ width: Math.max(element.current.clientWidth, 240), height });
    const onResize = () => plot?.setSize(size());
    (async () => {
      const { default: uPlot } = await import('/vendor/uplot.mjs');
      if (over) return;
      const { options, data } = build();
      plot = new uPlot({ ...size(), ...options }, data, element.current);
      window.addEventListener('resize', onResize);
    })();
    return () => {
      over = true;
      window.removeEventListener('resize', onResize);
      plot?.destroy();
    };
  }, deps);
}
