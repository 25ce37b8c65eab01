// Builds the console into ../internal/console/dist, which ag serve embeds: one script, one
// style sheet and the page. The output depends only on the sources and the locked versions, so
// CI rebuilds it and fails when the committed files differ.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

// The SDK's generated code and the console share one protobuf runtime, the console's, whatever
// sdk/ts/node_modules holds.
const oneProtobufRuntime = {
  name: "one-protobuf-runtime",
  setup(b) {
    b.onResolve({ filter: /^@bufbuild\/protobuf(\/|$)/ }, (args) => {
      if (args.pluginData === "console") return undefined;
      return b.resolve(args.path, { resolveDir: here, kind: args.kind, pluginData: "console" });
    });
  },
};
const out = join(here, "..", "internal", "console", "dist");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(here, "src", "main.tsx")],
  outfile: join(out, "app.js"),
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  platform: "browser",
  legalComments: "none",
  charset: "utf8",
  define: { "process.env.NODE_ENV": '"production"' },
  plugins: [oneProtobufRuntime],
  logLevel: "warning",
});
copyFileSync(join(here, "src", "index.html"), join(out, "index.html"));
copyFileSync(join(here, "src", "app.css"), join(out, "app.css"));
