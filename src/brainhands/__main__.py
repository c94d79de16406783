from brainhands.cli import main

raise SystemExit(main())
